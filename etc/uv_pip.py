"""`uv pip install` into this Python's environment, from the package sources pip would use.

make setup installs with uv where it can be had. uv reads no pip configuration (pip.conf, the PIP_* variables), so a
machine whose pip is set up for a mirror, a wheel folder or a custom certificate would get other packages from uv,
or none: PyTorch's CPU wheel in a pip find-links folder, for one, would be passed over for PyPI's CUDA build. This
script asks pip for its configuration (``pip config list``: the files and the environment) and hands uv the same
sources: the index, the extra indexes, the find-links folders, no-index, the constraints files and the certificate
bundle. uv then chooses as pip does, the best version over all of them (``--index-strategy unsafe-best-match``;
uv's own default stops at the first index that has the package).

    python etc/uv_pip.py UV install ARGS...   runs UV pip install --python <this Python> <pip's sources> ARGS
    python etc/uv_pip.py UV sources           prints uv's arguments for pip's sources, one a line

An ``--index-url`` in ARGS replaces pip's configured index, as it does on pip's command line.
"""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys

# pip's options that choose where packages come from -> uv's; the list ones take several values, space-separated
_SINGLE = {"index-url": "--index-url", "cert": None}
_LISTS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links", "constraint": "--constraint"}
_FLAGS = {"no-index": "--no-index"}
# where a setting comes from, lowest precedence first: pip's [global] section, then [install] (pip install reads
# both), then the PIP_* environment variables (":env:" in `pip config list`)
_PRECEDENCE = ("global", "install", ":env:")


def pip_settings(listing: str) -> dict[str, str]:
    """{option: value} in force for `pip install`, from the output of `pip config list` (``section.option='value'``
    a line, each section already merged over pip's configuration files)."""
    found: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        name, sep, quoted = line.partition("=")
        section, _, option = name.rpartition(".")
        if not sep or section not in _PRECEDENCE:
            continue
        try:
            value = ast.literal_eval(quoted)
        except (ValueError, SyntaxError):
            value = quoted.strip("'\"")
        rank = _PRECEDENCE.index(section)
        if option not in found or rank >= found[option][0]:
            found[option] = (rank, str(value))
    return {option: value for option, (_, value) in found.items()}


def _true(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def uv_sources(settings: dict[str, str], *, index_given: bool = False) -> tuple[list[str], dict[str, str]]:
    """uv's arguments and environment for pip's ``settings`` (see pip_settings)."""
    args: list[str] = []
    env: dict[str, str] = {}
    if settings.get("index-url") and not index_given:
        args += ["--index-url", settings["index-url"]]
    for option, flag in _LISTS.items():
        for value in settings.get(option, "").split():
            args += [flag, value]
    for option, flag in _FLAGS.items():
        if _true(settings.get(option, "")):
            args.append(flag)
    if settings.get("cert"):
        env["SSL_CERT_FILE"] = settings["cert"]
    if args:  # several sources: the best version over all of them, as pip chooses
        args += ["--index-strategy", "unsafe-best-match"]
    return args, env


def _pip_config() -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False, timeout=120
    )
    return proc.stdout if proc.returncode == 0 else ""


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("install", "sources"):
        print(__doc__, file=sys.stderr)
        return 2
    uv, action, rest = argv[0], argv[1], argv[2:]
    index_given = any(a == "--index-url" or a.startswith("--index-url=") for a in rest)
    args, env = uv_sources(pip_settings(_pip_config()), index_given=index_given)
    if action == "sources":
        print("\n".join(args))
        return 0
    command = [uv, "pip", "install", "--python", sys.executable, *args, *rest]
    print(" ".join(shlex.quote(a) for a in command), flush=True)
    return subprocess.call(command, env={**env, **os.environ})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

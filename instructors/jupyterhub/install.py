"""Install the workshop hub into a folder of its own that every learner may read, apart from the instructor's clone
(``make hub-setup``; as root). Learners get the course, never the repository: no solutions/, no tests, no git
history, no instructors' folder. The clone (and the nbgrader course folder, and the hub's state) can then stay
private to the instructor (chmod 700).

    <prefix>/python   (only with --copy-python) the interpreter, copied where every account can run it
    <prefix>/env      one environment: the course (torch, JupyterLab, ...) with JupyterHub and nbgrader
    <prefix>/course   what learners get: notebooks, exercises, docs, both READMEs, course_utils, benchmarks
    <prefix>/hub      jupyterhub_config.py, the exchange service, nbgrader's settings, the proxy (npm)

Run it with the Python the hub should use (>= 3.11.5, as the pins need): every account must be able to run it, since
learners' servers run as their own Unix users. A Python under /root (pyenv) is not; --copy-python copies it into the
prefix (without its site-packages) and the hub then runs that copy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
LEARNER_MATERIAL = ["notebooks", "exercises", "docs", "README.md", "README.zh-CN.md", "course_utils", "benchmarks"]
HUB_FILES = ["jupyterhub_config.py", "exchange_service.py", "attn_exchange.py", "nbgrader_config.py"]
NOT_COPIED = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc", "results")


def runnable_by_everyone(path: Path) -> bool:
    """Whether an account other than the owner can run ``path`` (every folder above it searchable, the file
    executable and readable, the libraries it links found the same way)."""
    real = path.resolve()
    for folder in real.parents:
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return False
    mode = os.stat(real).st_mode
    return bool(mode & stat.S_IXOTH and mode & stat.S_IROTH)


def copy_python(prefix: Path) -> Path:
    """This interpreter's installation (without its site-packages) in ``prefix/python``; returns its python3."""
    base = Path(sys.base_prefix)
    target = prefix / "python"
    if target.exists():
        shutil.rmtree(target)
    site = Path(sysconfig.get_paths(vars={"base": str(base)})["purelib"]).resolve()
    shutil.copytree(
        base,
        target,
        symlinks=True,
        ignore=lambda folder, names: [n for n in names if Path(folder, n).resolve() == site or n == "__pycache__"],
    )
    (target / Path(site).relative_to(base.resolve())).mkdir(parents=True, exist_ok=True)
    return target / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"


IMAGE_FILES = ["binder", "etc", "pyproject.toml", "requirements.txt", "requirements-nbgrader.txt"]


def image_source(target: Path) -> Path:
    """What repo2docker builds Zero to JupyterHub's image from: the learners' material, binder/ (with nbgrader added
    for the assignment list) and, in etc/jupyter (which binder/postBuild installs), the exchange's nbgrader settings.
    No solutions, tests, git history or instructors' folder: everything in the image is readable in every pod."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in LEARNER_MATERIAL + IMAGE_FILES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=NOT_COPIED)
        else:
            shutil.copy2(source, target / name)
    with open(target / "binder" / "requirements.txt", "a") as fh:
        fh.write("# the workshop's image: nbgrader's assignment list and the exchange service's client\nnbgrader\n")
    for name in ("nbgrader_config.py", "attn_exchange.py"):
        shutil.copy2(HERE / name, target / "etc" / "jupyter" / name)
    return target


def run(*cmd, **kwargs):
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run(list(map(str, cmd)), check=True, **kwargs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=Path, default=Path("/srv/attention-by-hand"))
    parser.add_argument("--copy-python", action="store_true", help="copy this Python into the prefix (see above)")
    parser.add_argument("--without-triton", action="store_true", help="leave triton out (notebook 14 needs it)")
    parser.add_argument("--torch-index", default="", help="pip index for torch (e.g. PyTorch's CPU index)")
    parser.add_argument("--chp-version", default="5.3.0", help="configurable-http-proxy's version (npm)")
    parser.add_argument(
        "--image-source",
        type=Path,
        metavar="DIR",
        help="only write what repo2docker builds Zero to JupyterHub's image from into DIR (see z2jh-values.yaml)",
    )
    args = parser.parse_args(argv)
    if args.image_source:
        print(f"the image's source is in {image_source(args.image_source.resolve())}")
        return 0
    if sys.version_info < (3, 11, 5):
        parser.error(f"the pinned packages need Python >= 3.11.5; this is {sys.version.split()[0]}")
    prefix = args.prefix.resolve()
    prefix.mkdir(parents=True, exist_ok=True)
    prefix.chmod(0o755)
    env_lib = []
    if args.copy_python:
        python = copy_python(prefix)
        env_lib = [f"LD_LIBRARY_PATH={prefix / 'python' / 'lib'}"]
    else:
        python = Path(sys.executable)
        if not runnable_by_everyone(python):
            parser.error(
                f"{python} cannot be run by other accounts (learners' servers run as their own users): "
                "run this with a Python every account can run, or pass --copy-python"
            )

    # the environment: the course's pins and the hub's, one resolution (they share their pins)
    env = prefix / "env"
    if not (env / "bin" / "python").exists():
        run("env", *env_lib, python, "-m", "venv", env) if env_lib else run(python, "-m", "venv", env)
    requirements = [line for line in (REPO / "requirements.txt").read_text().splitlines()]
    if args.without_triton:
        requirements = [line for line in requirements if not line.startswith("triton==")]
    pinned = prefix / "requirements.txt"
    pinned.write_text("\n".join(requirements) + "\n")
    pip = [env / "bin" / "python", "-m", "pip", "install", "-q"]
    child_env = dict(os.environ, **dict(item.split("=", 1) for item in env_lib))
    if args.torch_index:
        torch_pin = next(line for line in requirements if line.startswith("torch=="))
        run(*pip, "--index-url", args.torch_index, torch_pin, env=child_env)
    run(*pip, "-r", pinned, "-r", REPO / "requirements-hub.txt", env=child_env)

    # what learners get, and the course_utils their kernels import (no editable install pointing into the clone)
    course = prefix / "course"
    if course.exists():
        shutil.rmtree(course)
    course.mkdir()
    for name in LEARNER_MATERIAL:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, course / name, ignore=NOT_COPIED)
        else:
            shutil.copy2(source, course / name)
    purelib = subprocess.run(
        [str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        env=child_env,
    ).stdout.strip()
    Path(purelib, "attention_by_hand.pth").write_text(f"{course}\n")
    # the course's kernel and JupyterLab settings, as make setup installs them
    (env / "etc").mkdir(exist_ok=True)
    for name in ("ipython", "jupyter"):
        shutil.copytree(REPO / "etc" / name, env / "etc" / name, dirs_exist_ok=True)
    settings = env / "share" / "jupyter" / "lab" / "settings"
    settings.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / "etc" / "lab" / "overrides.json", settings / "overrides.json")

    # the hub's files and its proxy
    hub = prefix / "hub"
    hub.mkdir(exist_ok=True)
    for name in HUB_FILES:
        shutil.copy2(HERE / name, hub / name)
    if not (hub / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy").exists():
        if shutil.which("npm") is None:
            parser.error("the hub's proxy comes from npm: install Node.js and npm (apt-get install npm)")
        run(
            "npm",
            "install",
            "--silent",
            "--no-audit",
            "--no-fund",
            "--prefix",
            hub / "proxy",
            f"configurable-http-proxy@{args.chp_version}",
        )

    # readable by every account, writable by none but root
    for path in [prefix, *prefix.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        path.chmod((mode | stat.S_IRGRP | stat.S_IROTH | (0o011 if mode & 0o100 or path.is_dir() else 0)) & ~0o022)
    print(
        f"the workshop hub is installed in {prefix}: start it with\n"
        f"  {' '.join(env_lib)} {env}/bin/jupyterhub -f {hub}/jupyterhub_config.py".replace("  ", " ")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

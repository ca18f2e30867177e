"""make setup's two paths: uv where it can be had (the uv command, or bootstrapped from the package index), pip
otherwise, each installing the same pins from the same sources; and the bytecode written once after install.

The Makefile's recipe runs for real, into a temporary VENV, with a stand-in for the environment's Python and for uv
that record what they are asked to install (nothing is downloaded): the installer chosen, the torch pin from its
index, requirements.txt, the editable course_utils, then etc/bytecode.py. pip's configuration is emptied for the run
(PIP_CONFIG_FILE=/dev/null), so that no machine's own sources enter what is compared.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.course.test_environment import pins

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    shutil.which("make") is None or not sys.platform.startswith("linux"), reason="make setup's recipe needs make"
)
TORCH_PIN = f"torch=={pins(ROOT / 'requirements.txt')['torch']}"
INDEX = "https://torch.example.invalid/whl/cpu"  # TORCH_INDEX given: no reachability probe


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "etc" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


uv_pip = _load("uv_pip")

# ---------------------------------------------------------------------------------------- pip's sources for uv


def test_pip_settings_take_the_environment_over_install_over_global():
    listing = "\n".join(
        [
            ":env:.find-links='/wheels/env'",
            ":env:.default-timeout='180'",
            "global.find-links='/wheels/global'",
            "global.index-url='https://mirror.example/simple'",
            "install.index-url='https://install.example/simple'",
            "global.extra-index-url='https://a.example/simple https://b.example/simple'",
            "global.cert='/certs/bundle.crt'",
            "site.no-index='true'",  # not a section pip install reads: ignored
        ]
    )
    settings = uv_pip.pip_settings(listing)
    assert settings["find-links"] == "/wheels/env"
    assert settings["index-url"] == "https://install.example/simple"
    assert "no-index" not in settings
    args, env = uv_pip.uv_sources(settings)
    assert args == [
        "--index-url",
        "https://install.example/simple",
        "--extra-index-url",
        "https://a.example/simple",
        "--extra-index-url",
        "https://b.example/simple",
        "--find-links",
        "/wheels/env",
        "--index-strategy",
        "unsafe-best-match",  # the best version over all of pip's sources, as pip chooses
    ]
    assert env == {"SSL_CERT_FILE": "/certs/bundle.crt"}
    # an --index-url on the command line (TORCH_INDEX) replaces pip's index, as it does for pip
    args, _ = uv_pip.uv_sources(settings, index_given=True)
    assert "--index-url" not in args and "/wheels/env" in args


def test_no_pip_configuration_gives_uv_its_defaults():
    assert uv_pip.uv_sources(uv_pip.pip_settings("")) == ([], {})
    args, _ = uv_pip.uv_sources({"no-index": "true", "find-links": "/w", "constraint": "/c.txt"})
    assert args == [
        "--find-links",
        "/w",
        "--constraint",
        "/c.txt",
        "--no-index",
        "--index-strategy",
        "unsafe-best-match",
    ]


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "MAKE")) and k != "MFLAGS"}
    env.update(PIP_CONFIG_FILE=os.devnull, HOME=str(tmp_path / "home"), LOG=str(tmp_path / "log"))
    env.update(extra)
    return env


def _fake_uv(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "uv 0.0.0-stand-in"; exit 0; }\necho "uv $*" >> "$LOG"\n'
    )
    path.chmod(0o755)
    return path


def test_uv_pip_hands_pip_sources_from_the_environment_to_uv(tmp_path):
    uv = _fake_uv(tmp_path / "bin" / "uv")
    env = _clean_env(tmp_path, PIP_FIND_LINKS=str(tmp_path / "wheels"))
    subprocess.run(
        [sys.executable, str(ROOT / "etc" / "uv_pip.py"), str(uv), "install", TORCH_PIN], env=env, check=True
    )
    (line,) = (tmp_path / "log").read_text().splitlines()
    assert line.split() == [
        "uv",
        "pip",
        "install",
        "--python",
        sys.executable,
        "--find-links",
        str(tmp_path / "wheels"),
        "--index-strategy",
        "unsafe-best-match",
        TORCH_PIN,
    ]


# ---------------------------------------------------------------------------------------- the Makefile's two paths

FAKE_PYTHON = """#!/bin/sh
# the environment's Python, standing in: records each call; runs etc/uv_pip.py for real (with the fake uv)
echo "python $*" >> "$LOG"
case "$1" in
    etc/uv_pip.py) exec "$REAL_PYTHON" "$@" ;;
    etc/bytecode.py) echo "bytecode PYTHONDONTWRITEBYTECODE=[$PYTHONDONTWRITEBYTECODE]" >> "$LOG"; exit 0 ;;
esac
case "$*" in
    *"--target"*)  # the uv bootstrap: succeeds when the test says so, with a uv that records its calls
        [ "$BOOTSTRAP" = ok ] || exit 1
        target=$(echo "$*" | sed 's/.*--target \\([^ ]*\\).*/\\1/')
        mkdir -p "$target/bin" && cp "$FAKE_UV" "$target/bin/uv" ;;
esac
exit 0
"""


def _make_setup(tmp_path: Path, *args: str, uv: str = "missing", bootstrap: str = "fail"):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    fake_python = venv / "bin" / "python"
    fake_python.write_text(FAKE_PYTHON)
    fake_python.chmod(0o755)
    fake_uv = _fake_uv(tmp_path / "fake" / "uv")
    env = _clean_env(
        tmp_path, REAL_PYTHON=sys.executable, FAKE_UV=str(fake_uv), BOOTSTRAP=bootstrap, PYTHONDONTWRITEBYTECODE="1"
    )
    uv_command = str(fake_uv) if uv == "found" else str(tmp_path / "no-such-uv")
    proc = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "setup",
            f"VENV={venv}",
            f"UV={uv_command}",
            f"UV_BOOTSTRAP={tmp_path / 'boot'}",
            f"TORCH_INDEX={INDEX}",
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    log = (tmp_path / "log").read_text().splitlines() if (tmp_path / "log").exists() else []
    return proc, log


def _installs(log: list[str]) -> list[list[str]]:
    """What each install asked for, whichever installer: the arguments after `install` (pip's --python and pip's
    own -m pip dropped), the uv bootstrap left out."""
    out = []
    for line in log:
        words = line.split()
        if "install" not in words or "--target" in words or words[:2] == ["python", "etc/uv_pip.py"]:
            continue
        rest = words[words.index("install") + 1 :]
        if "--python" in rest:
            i = rest.index("--python")
            rest = rest[:i] + rest[i + 2 :]
        out.append(rest)
    return out


def test_uv_on_path_installs_the_pins_then_writes_the_bytecode(tmp_path):
    proc, log = _make_setup(tmp_path, uv="found")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== 1/4 installer: uv 0.0.0-stand-in" in proc.stdout
    assert [line.split()[0] for line in log if line.startswith("uv ")] == ["uv"] * 3
    assert not any(line.startswith("python -m pip install") for line in log), log
    assert _installs(log) == [
        ["--index-url", INDEX, TORCH_PIN],
        ["-r", "requirements.txt"],
        ["-q", "--no-deps", "-e", "."],
    ]
    assert log[-1] == "bytecode PYTHONDONTWRITEBYTECODE=[]", log  # the last step, writing whatever the shell says
    for step in ("== 1/4", "== 2/4", "== 3/4", "== 4/4"):
        assert step in proc.stdout
    assert (tmp_path / "venv" / ".installer").read_text().strip() == str(tmp_path / "fake" / "uv")
    assert (tmp_path / "venv" / ".installed-course").exists()


def test_uv_bootstrapped_from_the_package_index_where_it_is_not_on_path(tmp_path):
    proc, log = _make_setup(tmp_path, bootstrap="ok")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"into {tmp_path / 'boot'}" in proc.stdout
    (bootstrap,) = [line for line in log if "--target" in line]
    assert bootstrap.split()[-1].startswith("uv==") and str(tmp_path / "boot") in bootstrap
    assert sum(line.startswith("uv pip install") for line in log) == 3
    # a second setup finds the bootstrapped uv and does not fetch it again
    (tmp_path / "venv" / ".installed-course").unlink()
    (tmp_path / "log").unlink()
    proc, log = _make_setup(tmp_path, bootstrap="fail")
    assert proc.returncode == 0 and not any("--target" in line for line in log)
    assert f"({tmp_path / 'boot'})" in proc.stdout


def test_pip_installs_the_same_pins_where_uv_cannot_be_had(tmp_path):
    uv_proc, uv_log = _make_setup(tmp_path / "uv", uv="found")
    proc, log = _make_setup(tmp_path / "pip", bootstrap="fail")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "uv could not be had: pip installs the same pins" in proc.stdout
    assert not (tmp_path / "pip" / "boot").exists()  # a failed bootstrap leaves nothing half made
    assert not any(line.startswith("uv ") for line in log)
    assert [line for line in log if line.startswith("python -m pip install -r")], log
    assert _installs(log) == _installs(uv_log)  # the same pins, from the same index
    assert log[-1] == "bytecode PYTHONDONTWRITEBYTECODE=[]"
    assert (tmp_path / "pip" / "venv" / ".installer").read_text().strip() == "pip"


def test_installer_pip_takes_pip_even_with_uv_at_hand(tmp_path):
    proc, log = _make_setup(tmp_path, "INSTALLER=pip", uv="found")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== 1/4 installer: pip (INSTALLER=pip)" in proc.stdout
    assert not any(line.startswith("uv ") or "--target" in line for line in log)


def test_installer_uv_stops_where_uv_cannot_be_had(tmp_path):
    proc, log = _make_setup(tmp_path, "INSTALLER=uv", bootstrap="fail")
    assert proc.returncode != 0
    assert "INSTALLER=uv, but uv could not be had" in proc.stderr
    assert not any("-r" in words for words in _installs(log))


def test_without_triton_uv_gets_every_pin_but_triton(tmp_path):
    proc, log = _make_setup(tmp_path, "WITH_TRITON=0", uv="found")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    requirements = tmp_path / "venv" / "requirements-without-triton.txt"
    assert ["-r", str(requirements)] in _installs(log)
    kept = pins(requirements)
    assert "triton" not in kept and kept == {k: v for k, v in pins(ROOT / "requirements.txt").items() if k != "triton"}


def test_the_test_tools_come_from_the_installer_setup_chose(tmp_path):
    proc, _ = _make_setup(tmp_path, uv="found")
    assert proc.returncode == 0
    (tmp_path / "log").unlink()
    venv = tmp_path / "venv"
    env = _clean_env(tmp_path, REAL_PYTHON=sys.executable)
    done = subprocess.run(
        ["make", "--no-print-directory", f"VENV={venv}", f"UV={tmp_path / 'no-such-uv'}", str(venv / ".installed")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert _installs((tmp_path / "log").read_text().splitlines()) == [["-r", "requirements-test.txt"]]
    assert (tmp_path / "log").read_text().startswith("python etc/uv_pip.py")


# ---------------------------------------------------------------------------------------- the bytecode written


def test_the_bytecode_step_covers_what_a_grading_imports(tmp_path):
    """etc/bytecode.py, run as make setup runs it, writes the .pyc of every module of the environment and of the
    course that grading exercise 04's solution then imports (the notebook's cells run in one process: the check's
    grading is the sandbox's harness code, in process). Both runs read and write bytecode under a prefix of their
    own, so the environment's existing .pyc count for nothing; the grading writes none, as in the sandbox."""
    prefix = tmp_path / "pycache"
    env = dict(os.environ, PYTHONPYCACHEPREFIX=str(prefix), PYTHONDONTWRITEBYTECODE="", ATTN_HISTORY="off")
    env["MPLBACKEND"] = "Agg"
    subprocess.run([sys.executable, str(ROOT / "etc" / "bytecode.py")], env=env, check=True, capture_output=True)
    assert len(list(prefix.rglob("*.pyc"))) > 500
    script = tmp_path / "grade.py"
    script.write_text(GRADE_CELLS)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    proc = subprocess.run(
        [sys.executable, str(script), str(ROOT / "solutions" / "04_multihead_attention.ipynb")],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["passed"], proc.stdout[-2000:]
    assert report["imported"] > 500
    assert report["not_compiled"] == [], report["not_compiled"]


GRADE_CELLS = """
import json, linecache, os, sys
notebook = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for i, cell in enumerate(notebook["cells"]):
    if cell["cell_type"] == "code":
        source = "".join(line for line in cell["source"] if not line.lstrip().startswith(("%", "!")))
        name = f"<cell {i}>"
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        exec(compile(source, name, "exec"), namespace)
roots = (sys.prefix, os.getcwd())  # the environment and the course: the standard library is the Python's own
cached = {n: m.__cached__ for n, m in list(sys.modules.items()) if isinstance(getattr(m, "__cached__", None), str)}
files = {n: getattr(sys.modules[n], "__file__", "") or "" for n in cached}
print(json.dumps({
    "passed": bool(namespace.get("result")),
    "imported": len(cached),
    "not_compiled": sorted(n for n in cached if files[n].startswith(roots) and not os.path.exists(cached[n])),
}))
"""

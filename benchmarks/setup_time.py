"""How long a learner waits from a fresh clone until JupyterLab answers, with uv and with pip, in one run.

    python benchmarks/setup_time.py [--installers uv,pip] [--keep DIR]

For each installer: a fresh clone of this checkout's HEAD in a temporary folder, `make setup INSTALLER=...` with an
empty package cache of its own (uv's and pip's; the wheels are fetched again), then `jupyter lab` as `make lab`
starts it, headless, until its API answers. Reports both times side by side, the seconds of each setup step, the CPU
seconds of the setup (what it costs whatever else the machine runs), the environment's size (and the uv bootstrap's),
and the load. Needs the network (the package index) and about 2 GB of disk per installer. A measurement, not a test:
run it by hand (it takes minutes with pip).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _children_cpu() -> float:
    """CPU seconds (user and system) of this process's finished children: what a setup cost whatever the load."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _lab_ready(clone: Path, venv: Path, timeout: float = 300) -> float:
    """Seconds from `jupyter lab` (make lab's command, headless) until its contents API answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    cmd = [
        str(venv / "bin" / "jupyter"),
        "lab",
        "--ServerApp.root_dir=.",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        *(["--allow-root"] if os.geteuid() == 0 else []),
    ]
    home = clone / ".lab-home"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTER_DATA_DIR=str(home / "data"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a learner's shell has it
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=clone, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/contents/", headers={"Authorization": f"token {token}"}
        )
        while time.perf_counter() - start < timeout:
            try:
                with urllib.request.urlopen(request, timeout=5):
                    return time.perf_counter() - start
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError("jupyter lab exited") from None
                time.sleep(0.2)
        raise RuntimeError("jupyter lab did not answer")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def measure(installer: str, workdir: Path) -> dict:
    clone = workdir / f"clone-{installer}"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    env = dict(os.environ, UV_CACHE_DIR=str(workdir / f"uv-cache-{installer}"))
    env["PIP_CACHE_DIR"] = str(workdir / f"pip-cache-{installer}")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    load_before = _load()
    cpu_before = _children_cpu()
    start = time.perf_counter()
    steps: list[tuple[str, float]] = []
    log = []
    proc = subprocess.Popen(
        ["make", "setup", f"INSTALLER={installer}"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        log.append(line)
        if re.match(r"== \d/\d", line):
            steps.append((line.strip()[:60], time.perf_counter() - start))
    if proc.wait() != 0:
        raise RuntimeError(f"make setup INSTALLER={installer} failed:\n{''.join(log[-40:])}")
    setup = time.perf_counter() - start
    cpu = _children_cpu() - cpu_before
    lab = _lab_ready(clone, clone / ".venv")
    torch_version = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return {
        "installer": installer,
        "setup_s": round(setup, 1),
        "setup_cpu_s": round(cpu, 1),
        "lab_start_s": round(lab, 1),
        "ready_s": round(setup + lab, 1),
        "steps": [(name, round(t, 1)) for name, t in steps],
        "venv_bytes": _size(clone / ".venv"),
        "bootstrap_bytes": _size(clone / ".venv-uv"),
        "torch": torch_version,
        "load_before": load_before,
        "load_after": _load(),
        "log_tail": "".join(log[-6:]),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--installers", default="uv,pip")
    parser.add_argument("--keep", type=Path, help="keep the clones in this folder")
    args = parser.parse_args(argv)
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="setup-time-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for installer in args.installers.split(","):
            results.append(measure(installer, workdir))
            r = results[-1]
            print(
                f"{installer:4} setup {r['setup_s']:6.1f} s ({r['setup_cpu_s']:.0f} s of CPU) + lab "
                f"{r['lab_start_s']:4.1f} s = ready in "
                f"{r['ready_s']:6.1f} s; venv {r['venv_bytes'] / 2**30:.2f} GiB "
                f"(+ uv bootstrap {r['bootstrap_bytes'] / 2**20:.0f} MiB); torch {r['torch']}; "
                f"load {r['load_before']} -> {r['load_after']}",
                flush=True,
            )
            for name, t in r["steps"]:
                print(f"      {t:6.1f} s  {name}")
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    if len(results) == 2:
        a, b = results
        print(
            f"ready: {a['installer']} {a['ready_s']} s, {b['installer']} {b['ready_s']} s "
            f"({b['ready_s'] / a['ready_s']:.1f}x)"
        )
    print(json.dumps(results, indent=1, default=str), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`make lab` serves the repository root (exercises/ and solutions/ reachable from the file browser) and lands on
the notebooks' index, rendered as a Markdown preview: the browser it opens and the URL it prints (the one to copy when
it runs headless, or on a remote machine) both go to /lab/tree/notebooks/README.md, not to the Launcher.

The test runs the jupyter command of the Makefile's lab recipe (from `make -n lab`) with --no-browser on a free
port, asks the server what it serves, and stops it.
"""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="`make lab` needs make")


def lab_command(extra_args, target="lab"):
    dry_run = subprocess.run(
        ["make", "-s", "-n", target, f"LAB_ARGS={extra_args}", f"VENV={VENV_BIN.parent}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = dry_run.replace("\\\n", " ").splitlines()  # a recipe line continued with a backslash is one command
    commands = [" ".join(line.split()) for line in lines if " lab " in line and "jupyter" in line]
    assert len(commands) == 1, f"expected one jupyter lab command in `make -n lab`, got:\n{dry_run}"
    return commands[0]


def test_lab_recipe_opens_the_index_at_the_repository_root():
    command = lab_command("--no-browser")
    assert "--ServerApp.root_dir=." in command, command
    assert "--LabApp.default_url=/lab/tree/notebooks/README.md" in command, command
    assert "--allow-root" in command and "--no-browser" in command, command


def test_lab_zh_opens_the_chinese_index():
    command = lab_command("--no-browser", target="lab-zh")
    assert "--ServerApp.root_dir=." in command, command
    assert "--LabApp.default_url=/lab/tree/notebooks/zh-CN/README.md" in command, command
    assert (ROOT / "notebooks" / "zh-CN" / "README.md").exists()


def _get(url, token, timeout=5):
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _redirect(url, token):
    """Where the server sends a GET of ``url`` (its Location header)."""
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        urllib.request.build_opener(_NoRedirect).open(request, timeout=5)
    except urllib.error.HTTPError as e:
        if e.code in (301, 302, 303, 307, 308):
            return e.headers["Location"]
        raise
    raise AssertionError(f"{url} did not redirect")


def test_lab_serves_the_repository(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    command = lab_command(
        f"--no-browser --ip=127.0.0.1 --port={port} --ServerApp.port_retries=0 "
        f"--IdentityProvider.token={token} --ServerApp.terminals_enabled=False"
    )
    # the server settings make setup installs (etc/jupyter), read from this checkout: no news, no update checks,
    # no language-server search (its "Skipped non-installed server(s)" line)
    (tmp_path / "config").mkdir()
    shutil.copy(ROOT / "etc" / "jupyter" / "jupyter_server_config.json", tmp_path / "config")
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_DATA_DIR=str(tmp_path / "data"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        JUPYTER_PLATFORM_DIRS="1",
    )
    log = tmp_path / "lab.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                listing = _get(f"{base}/api/contents/", token)
                break
            except OSError as err:
                if proc.poll() is not None or time.monotonic() > deadline:
                    started = log.read_text(errors="replace")[-3000:]
                    raise AssertionError(f"jupyter lab did not start:\n{started}") from err
                time.sleep(0.5)
        names = {item["name"] for item in listing["content"]}
        assert {"notebooks", "exercises", "solutions", "course_utils"} <= names, names
        assert _get(f"{base}/api/contents/notebooks/README.md?content=0", token)["type"] == "file"
        # what a headless `make lab` prints for the learner to open (the token itself is shown as "..." here,
        # because this test sets it) and where the server's root redirects: the index, not /lab (the Launcher)
        index = "/lab/tree/notebooks/README.md"
        printed = log.read_text(errors="replace")
        assert f"http://127.0.0.1:{port}{index}?token=" in printed, printed[-3000:]
        assert _redirect(f"{base}/", token).rstrip("?") == index
        page = (
            urllib.request.urlopen(
                urllib.request.Request(f"{base}{index}", headers={"Authorization": f"token {token}"}), timeout=5
            )
            .read()
            .decode()
        )
        assert '"news": {"disabled": true}' in page, page[:2000]  # the page config: no news feed fetched
        assert "Skipped non-installed server" not in printed, printed[-3000:]
        if (Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json").exists():  # make setup
            settings = _get(f"{base}/lab/api/settings/@jupyterlab/docmanager-extension:plugin", token)
            viewers = settings["schema"]["properties"]["defaultViewers"]["default"]
            assert viewers.get("markdown") == "Markdown Preview", viewers  # etc/lab/overrides.json
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_lab_settings_turn_the_news_off():
    # etc/lab/overrides.json: JupyterLab's front end neither fetches news nor checks for updates (no pop-up)
    overrides = json.loads((ROOT / "etc" / "lab" / "overrides.json").read_text())
    notification = overrides["@jupyterlab/apputils-extension:notification"]
    assert notification == {"fetchNews": "false", "checkForUpdates": False}, notification

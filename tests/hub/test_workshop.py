"""A workshop on a real JupyterHub (`make test-hub`): instructors/jupyterhub/jupyterhub_config.py started on
127.0.0.1 with a test authenticator (JupyterHub's SharedPasswordAuthenticator) and a local
spawner (every server as this user, each learner in a home of its own), its proxy from npm, nbgrader's exchange in
a temporary folder.

The instructor generates and releases exercise 04 with nbgrader. Three learners log in through the hub's login page
in Chromium, land on the course's index, open notebook 01 and run it through JupyterLab's menus, then fetch exercise
04 from the exchange, write their answer in the notebook (through their server's contents API, as the editor
saves) and submit it from the page, as nbgrader's assignment list does: alice writes the solution, bob hands the
stub in, carol scales the scores by √d_out. The instructor collects, autogrades, generates and releases feedback;
each learner fetches it. The scores and the feedback that come back are checked, and the numbers an instructor
plans with (the hub's start, each learner's memory) are printed.

Runs only with RUN_HUB_TESTS=1; skipped, saying why, where the hub is not installed (an error in CI).
"""

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "browser"))
sys.path.insert(0, str(ROOT / "tests" / "nbgrader"))

from jlab import (  # noqa: E402 - the browser test's helpers, found by the path above
    CHROMIUM_ARGS,
    LAB_SETTINGS,
    _alive,
    _descendants,
    chromium_env,
    chromium_path,
    free_port,
    open_notebook,
    run_all_cells,
    wait_until_run,
)

VENV = ROOT / os.environ.get("NBGRADER_VENV", ".venv-nbgrader")
HUB, NBGRADER = VENV / "bin" / "jupyterhub", VENV / "bin" / "nbgrader"
PROXY = VENV / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
CONFIG = ROOT / "instructors" / "jupyterhub" / "jupyterhub_config.py"
COURSE_ID, ASSIGNMENT, MHA = "attention-by-hand", "workshop", "04_multihead_attention"
LEARNERS = ("alice", "bob", "carol")
INSTRUCTOR = "instructor"
NOTEBOOK = "01_self_attention.ipynb"
CAROL = ("attn_scores / self.head_dim ** 0.5", "attn_scores / self.d_out ** 0.5")
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def _skip_reason():
    if os.environ.get("RUN_HUB_TESTS", "") in ("", "0"):
        return "workshop hub test skipped: run `make test-hub` (it installs JupyterHub and its proxy)"
    if not HUB.exists() or not NBGRADER.exists():
        return f"JupyterHub or nbgrader is not installed in {VENV.name}: `make hub-setup` failed (its output says why)"
    if not PROXY.exists():
        return "configurable-http-proxy is not installed: `make hub-setup` needs npm"
    if chromium_path() is None:
        return "the workshop test needs Debian's chromium (apt-get install chromium)"
    return None


SKIP_REASON = _skip_reason()
if SKIP_REASON:
    if os.environ.get("RUN_HUB_TESTS") and os.environ.get("CI", "").lower() in ("1", "true"):
        raise RuntimeError(f"CI asked for the workshop hub test, but {SKIP_REASON}")
    pytest.skip(SKIP_REASON, allow_module_level=True)


# ---------------------------------------------------------------------------------------------------- the hub


class Hub:
    """JupyterHub from the workshop's own configuration, with the test's authenticator, spawner and folders."""

    def __init__(self, tmp: Path, exchange: Path):
        self.tmp, self.exchange = tmp, exchange
        self.password = secrets.token_hex(16)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "hub.log"
        self.proc = None
        self.known: dict = {}

    def start(self, timeout=120) -> float:
        (self.tmp / "hub").mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
        env.update(
            PATH=f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            ATTN_EXCHANGE=str(self.exchange),
            ATTN_INSTRUCTORS=INSTRUCTOR,
            ATTN_HUB_URL=self.url,
            PYTHONUNBUFFERED="1",
        )
        cmd = [
            str(HUB),
            "-f",
            str(CONFIG),
            "--JupyterHub.authenticator_class=shared-password",
            f"--SharedPasswordAuthenticator.user_password={self.password}",
            "--JupyterHub.spawner_class=jupyterhub.spawner.SimpleLocalProcessSpawner",
            f"--SimpleLocalProcessSpawner.home_dir_template={self.tmp / 'home' / '{username}'}",
            f"--JupyterHub.hub_port={free_port()}",
            f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{free_port()}",
            f"--JupyterHub.db_url=sqlite:///{self.tmp / 'hub' / 'jupyterhub.sqlite'}",
            f"--JupyterHub.cookie_secret_file={self.tmp / 'hub' / 'cookie_secret'}",
        ]
        if os.geteuid() == 0:  # the spawner starts servers as this user; JupyterLab refuses root without this
            cmd += [
                f"--Spawner.args={arg}"
                for arg in (
                    "--allow-root",
                    "--LabApp.news_url=",
                    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                )
            ]
        started = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.tmp / "hub",
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyterhub exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/hub/api/", timeout=5) as response:
                    if response.status == 200:
                        return time.monotonic() - started
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"the hub did not answer within {timeout} s:\n{self.log_tail()}")

    def log_tail(self, n=60):
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def remember(self):
        if self.proc is not None:
            self.known.update(_descendants(self.proc.pid))

    def stop(self):
        """Stop the hub (it stops the learners' servers) and anything left of what it started."""
        if self.proc is None:
            return []
        self.remember()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for pid in _alive(self.known):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.3)
        left, self.proc = _alive(self.known), None
        return left


def _server_memory(hub: Hub, learner: str) -> int:
    """Resident bytes of a learner's single-user server and everything it started (its kernels)."""
    table = _descendants(hub.proc.pid)
    servers = [pid for pid in table if f"/user/{learner}/" in _environ(pid, "JUPYTERHUB_SERVICE_PREFIX")]
    pids = set(servers)
    for pid in servers:
        pids |= set(_descendants(pid))
    return sum(_rss(pid) for pid in pids)


def _environ(pid, name) -> str:
    try:
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            key, _, value = item.partition(b"=")
            if key.decode(errors="replace") == name:
                return value.decode(errors="replace")
    except OSError:
        pass
    return ""


def _rss(pid) -> int:
    try:
        match = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    except OSError:
        return 0
    return int(match.group(1)) * 1024 if match else 0


# ---------------------------------------------------------------------------------------------------- nbgrader


def _nbgrader_env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    env.update(
        PATH=f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        JUPYTER_CONFIG_DIR=str(tmp / "jcfg"),
        JUPYTER_DATA_DIR=str(tmp / "jdata"),
        JUPYTER_RUNTIME_DIR=str(tmp / "jrun"),
        OMP_NUM_THREADS="1",
        ATTN_HISTORY="off",
    )
    return env


def _nbgrader(args, course: Path, exchange: Path, env: dict) -> str:
    proc = subprocess.run(
        [str(NBGRADER), *args, f"--Exchange.root={exchange}"],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"nbgrader {' '.join(args)} exited with {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    return proc.stdout + proc.stderr


def _answer(fetched: dict, learner: str) -> dict:
    """The fetched notebook with the learner's code in its solution cells."""
    solution = {c.id: c for c in nbformat.read(str(ROOT / "solutions" / f"{MHA}.ipynb"), as_version=4).cells}
    nb = nbformat.from_dict(fetched)
    for cell in nb.cells:
        if learner == "bob" or not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        code = "\n".join(line for line in solution[cell.id].source.split("\n") if line.strip() not in MARKERS)
        if learner == "carol" and cell.id == "solution":
            assert code.count(CAROL[0]) == 1
            code = code.replace(*CAROL)
        cell.source = code
    return nb


# ---------------------------------------------------------------------------------------------------- the page

_API_JS = """async ([method, path, body, form]) => {
  const xsrf = (document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || '';
  const init = {method, headers: {'X-XSRFToken': decodeURIComponent(xsrf)}, credentials: 'same-origin'};
  if (form) {
    init.body = new URLSearchParams(form);
  } else if (body !== null) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const response = await fetch(path, init);
  return {status: response.status, text: await response.text()};
}"""


def _api(page, method, path, body=None, form=None):
    answer = page.evaluate(_API_JS, [method, path, body, form])
    assert answer["status"] < 400, f"{method} {path}: {answer['status']} {answer['text'][:500]}"
    return json.loads(answer["text"]) if answer["text"] else None


def _assignments(page, action, learner):
    """nbgrader's assignment list: fetch, submit or fetch_feedback, then the list it answers with."""
    form = {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT}
    answer = _api(page, "POST", f"/user/{learner}/assignments/{action}", form=form)
    assert answer.get("success"), f"{learner}: {action} failed: {str(answer.get('value'))[-2000:]}"
    return [a for a in answer["value"] if a["assignment_id"] == ASSIGNMENT]


class _Lab:
    """What jlab.open_notebook needs of a server: the URL of a file in this learner's JupyterLab."""

    def __init__(self, hub_url, learner):
        self.prefix = f"{hub_url}/user/{learner}"

    def url(self, rel):
        return f"{self.prefix}/lab/tree/{rel}?reset"


def _lab_settings(home: Path):
    """The browser test's JupyterLab settings in a learner's home (every cell in the page, so that the test can read
    each prompt; no news pop-up)."""
    for plugin, values in LAB_SETTINGS.items():
        path = home / ".jupyter" / "lab" / "user-settings" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _log_in(page, hub: Hub, learner: str):
    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", learner)
    page.fill("input[name=password]", hub.password)
    page.click("input[type=submit], button[type=submit]")
    # the hub starts the server, then JupyterLab opens the course's index (the spawner's default URL)
    page.wait_for_url(re.compile(rf"/user/{learner}/lab/tree/attention-by-hand/notebooks/README\.md"), timeout=120_000)
    page.locator(".jp-RenderedMarkdown h1", has_text="The course notebooks").first.wait_for(timeout=120_000)


# ---------------------------------------------------------------------------------------------------- the test


def test_a_workshop_on_jupyterhub(tmp_path):
    exchange, course = tmp_path / "exchange", tmp_path / "course"
    exchange.mkdir(mode=0o777)
    env = _nbgrader_env(tmp_path)
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy(ROOT / "instructors" / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copy(ROOT / "solutions" / f"{MHA}.ipynb", course / "source" / ASSIGNMENT / f"{MHA}.ipynb")
    _nbgrader(["generate_assignment", ASSIGNMENT, "--force"], course, exchange, env)
    _nbgrader(["release_assignment", ASSIGNMENT, "--force"], course, exchange, env)

    hub = Hub(tmp_path, exchange)
    numbers = {}
    try:
        numbers["hub start (s)"] = round(hub.start(), 1)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_path(),
                headless=True,
                args=CHROMIUM_ARGS,
                env=chromium_env(tmp_path / "chromium"),
            )
            try:
                for learner in LEARNERS:
                    _lab_settings(tmp_path / "home" / learner)
                    context = browser.new_context(viewport={"width": 1280, "height": 900})
                    context.set_default_timeout(60_000)
                    page = context.new_page()
                    started = time.monotonic()
                    _log_in(page, hub, learner)
                    numbers[f"{learner}: log in to the index (s)"] = round(time.monotonic() - started, 1)
                    assert (tmp_path / "home" / learner / "attention-by-hand" / "exercises").is_dir()
                    assert not (tmp_path / "home" / learner / "attention-by-hand" / "solutions").exists()

                    # a notebook of the course, run through the menus as a learner does
                    nb = nbformat.read(str(ROOT / "notebooks" / NOTEBOOK), as_version=4)
                    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
                    open_notebook(
                        page, _Lab(hub.url, learner), f"attention-by-hand/notebooks/{NOTEBOOK}", len(nb.cells)
                    )
                    run_all_cells(page)
                    cells = wait_until_run(page, code)["cells"]
                    errors = [(i, c["stderr"][:1]) for i, c in enumerate(cells) if c["stderr"]]
                    assert not errors, f"{learner}: {NOTEBOOK} failed in the hub: {errors}"
                    numbers[f"{learner}: memory, server and kernel (MiB)"] = _server_memory(hub, learner) >> 20

                    # exercise 04 from the exchange: fetch, answer, submit, as the assignment list does
                    base = f"/user/{learner}"
                    listed = _assignments(page, "fetch", learner)
                    assert any(a["status"] == "fetched" for a in listed), listed
                    path = f"{ASSIGNMENT}/{MHA}.ipynb"
                    fetched = _api(page, "GET", f"{base}/api/contents/{path}?content=1")["content"]
                    answer = _answer(fetched, learner)
                    _api(
                        page,
                        "PUT",
                        f"{base}/api/contents/{path}",
                        body={"type": "notebook", "format": "json", "content": json.loads(nbformat.writes(answer))},
                    )
                    listed = _assignments(page, "submit", learner)
                    assert any(a["status"] == "submitted" for a in listed), f"{learner}: nothing submitted: {listed}"
                    hub.remember()
                    context.close()

                # the instructor: collect, autograde (in the course's kernel), feedback
                _nbgrader(["collect", ASSIGNMENT], course, exchange, env)
                assert sorted(p.name for p in (course / "submitted").iterdir()) == sorted(LEARNERS)
                started = time.monotonic()
                _nbgrader(["autograde", ASSIGNMENT, "--force"], course, exchange, env)
                numbers["autograde, 3 learners (s)"] = round(time.monotonic() - started, 1)
                _nbgrader(["generate_feedback", ASSIGNMENT, "--force"], course, exchange, env)
                _nbgrader(["release_feedback", ASSIGNMENT], course, exchange, env)
                scores = _scores(course, env)
                assert scores["alice"] == scores["max"] > 0, scores
                assert scores["bob"] == 0, scores
                assert 0 < scores["carol"] < scores["max"], scores

                # the feedback comes back to each learner's home, through their own server
                for learner in LEARNERS:
                    context = browser.new_context()
                    page = context.new_page()
                    _log_in(page, hub, learner)
                    _assignments(page, "fetch_feedback", learner)
                    (feedback,) = (tmp_path / "home" / learner / ASSIGNMENT / "feedback").glob(f"*/{MHA}.html")
                    text = feedback.read_text(encoding="utf-8")
                    got, worth = map(float, re.search(r"\(Score: ([\d.]+) / ([\d.]+)\)", text).groups())
                    assert (got, worth) == pytest.approx((scores[learner], scores["max"]), abs=0.01), learner
                    if learner == "carol":
                        assert "√head_dim" in text  # the grader's diagnosis reaches the learner
                    context.close()
            finally:
                browser.close()
    except BaseException:
        print(hub.log_tail(), file=sys.stderr)
        raise
    finally:
        left = hub.stop()
    print("\nworkshop numbers:", json.dumps(numbers, indent=1))
    assert not left, f"processes outlived the hub: {left}"


def _scores(course: Path, env: dict) -> dict:
    """Each learner's score on exercise 04 and its maximum, read from nbgrader's gradebook."""
    script = (
        "import json, sys\nfrom nbgrader.api import Gradebook\n"
        "with Gradebook('sqlite:///gradebook.db', course_id=sys.argv[1]) as gb:\n"
        "    subs = gb.assignment_submissions(sys.argv[2])\n"
        "    print(json.dumps({s.student_id: s.score for s in subs} | "
        "{'max': gb.find_assignment(sys.argv[2]).max_score}))\n"
    )
    proc = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", script, COURSE_ID, ASSIGNMENT],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)

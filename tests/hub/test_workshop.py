"""The workshop hub as the README deploys it, attacked (`make test-hub`, as root: it creates Unix accounts).

`make test-hub` installs the hub with instructors/jupyterhub/install.py into a folder of its own (HUB_DIR), as
`make hub-setup` does; this test starts that hub's jupyterhub_config.py on 127.0.0.1 with PAM (the default
authenticator) and four Unix accounts it creates and removes: three learners and an instructor, each with a random
password. The hub's state is in a private temporary folder; the instructor's nbgrader course folder is in the
instructor's home.

The round trip: the instructor logs in, takes a token from the hub and generates and releases exercise 04 through
the exchange service. Three learners log in through the login page in Chromium, land on the course's index, open
notebook 01 and run it through JupyterLab's menus, fetch exercise 04, write their answer (through their server's
contents API, as the editor saves) and submit it from the page as nbgrader's assignment list does: alice writes the
solution, bob hands the stub in, carol scales by √d_out. The instructor collects, autogrades, releases feedback;
each learner fetches their own.

The attacks, each of which must fail: bob submits as alice (JUPYTERHUB_USER and --student in his own server's
terminal), bob calls the exchange without a token and with his own token as an instructor, bob reads alice's home,
the exchange's store, the hub's state and the instructor's course folder (where the solutions are), every file
learners can reach is searched for a solution, and bob's kernel allocates more memory than the per-learner limit:
his kernel is stopped, alice's goes on.

Runs only with RUN_HUB_TESTS=1 and HUB_DIR; skipped, saying why, where the hub is not installed or this is not root
(an error in CI).
"""

import base64
import datetime
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "browser"))

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

PREFIX = Path(os.environ.get("HUB_DIR", "/nonexistent"))
ENV, HUB_FILES = PREFIX / "env", PREFIX / "hub"
COURSE_ID, ASSIGNMENT, MHA = "attention-by-hand", "workshop", "04_multihead_attention"
ALICE, BOB, CAROL, TEACHER = "attn-alice", "attn-bob", "attn-carol", "attn-teacher"
LEARNERS = (ALICE, BOB, CAROL)
NOTEBOOK = "01_self_attention.ipynb"
CAROL_SLIP = ("attn_scores / self.head_dim ** 0.5", "attn_scores / self.d_out ** 0.5")
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
MEMORY_LIMIT_MIB = 1536  # per learner in this test: a server and a kernel that ran notebook 01 use about 0.5 GiB
HOG_MIB = 3072  # what bob's kernel tries to hold
EXCHANGE_QUOTA_MIB = 8  # what one learner's submissions may take in the exchange, in this test
EXCHANGE_KEEP = 5  # a learner's newest submissions of one assignment the exchange keeps (exchange_service.KEEP)


def _skip_reason():
    if os.environ.get("RUN_HUB_TESTS", "") in ("", "0"):
        return "workshop hub test skipped: run `make test-hub` (it installs the hub into HUB_DIR)"
    if os.geteuid() != 0:
        return "the workshop hub test creates Unix accounts for its learners: run it as root"
    if not (ENV / "bin" / "jupyterhub").exists() or not (HUB_FILES / "jupyterhub_config.py").exists():
        return f"the hub is not installed in HUB_DIR={PREFIX}: `make hub-setup` failed (its output says why)"
    if not (HUB_FILES / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy").exists():
        return "configurable-http-proxy is not installed: the hub's install needs npm"
    if shutil.which("useradd") is None or shutil.which("runuser") is None:
        return "the workshop hub test needs useradd and runuser (Debian's passwd and util-linux)"
    if chromium_path() is None:
        return "the workshop test needs Debian's chromium (apt-get install chromium)"
    return None


SKIP_REASON = _skip_reason()
if SKIP_REASON:
    if os.environ.get("RUN_HUB_TESTS") and os.environ.get("CI", "").lower() in ("1", "true"):
        raise RuntimeError(f"CI asked for the workshop hub test, but {SKIP_REASON}")
    pytest.skip(SKIP_REASON, allow_module_level=True)


def _library_path() -> dict:
    """install.py --copy-python: the interpreter's library lies in the prefix (jupyterhub_config.py does the same)."""
    lib = PREFIX / "python" / "lib"
    return {"LD_LIBRARY_PATH": str(lib)} if lib.is_dir() else {}


# ---------------------------------------------------------------------------------------------------- accounts


class Accounts:
    """Unix accounts for the test, with random passwords; removed with everything they ran."""

    def __init__(self, names):
        self.names, self.passwords = list(names), {}

    def __enter__(self):
        for name in self.names:
            self._remove(name)  # a previous run that died
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
            self.passwords[name] = secrets.token_urlsafe(18)
            subprocess.run(["chpasswd"], input=f"{name}:{self.passwords[name]}\n", text=True, check=True)
        return self

    def __exit__(self, *exc):
        for name in self.names:
            self._remove(name)

    @staticmethod
    def _remove(name):
        try:
            uid = pwd.getpwnam(name).pw_uid
        except KeyError:
            return
        for status in Path("/proc").glob("[0-9]*/status"):  # what the test's account still runs
            try:
                owner = int(re.search(r"^Uid:\s+(\d+)", status.read_text(), re.M).group(1))
                if owner == uid:
                    os.kill(int(status.parent.name), signal.SIGKILL)
            except (OSError, AttributeError, ValueError):
                pass
        subprocess.run(["userdel", "--remove", name], capture_output=True)

    def home(self, name) -> Path:
        return Path(pwd.getpwnam(name).pw_dir)

    def give(self, name, path: Path):
        account = pwd.getpwnam(name)
        for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
            os.chown(p, account.pw_uid, account.pw_gid)

    def run(self, name, args, env=None, cwd=None, check=True, timeout=600) -> subprocess.CompletedProcess:
        """``args`` as the account ``name``, in ``env`` only (as its own server's terminal would be)."""
        env = {**(env or {}), "HOME": str(self.home(name)), "USER": name, "LOGNAME": name}
        command = ["runuser", "-u", name, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *args]
        proc = subprocess.run(command, cwd=cwd or self.home(name), capture_output=True, text=True, timeout=timeout)
        if check:
            assert proc.returncode == 0, (
                f"{name}: {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc


# ---------------------------------------------------------------------------------------------------- the hub


class Hub:
    """The installed hub, started as the README says, with the test's accounts, ports and state folder."""

    def __init__(self, tmp: Path):
        self.state = tmp / "state"
        self.port, self.exchange_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.exchange = f"http://127.0.0.1:{self.exchange_port}/services/exchange/"
        self.log = tmp / "hub.log"
        self.proc = None
        self.known: dict = {}

    def start(self, timeout=180) -> float:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_", "ATTN_"))}
        env.update(
            ATTN_LEARNERS=",".join(LEARNERS),
            ATTN_INSTRUCTORS=TEACHER,
            ATTN_HUB_URL=self.url,
            ATTN_HUB_STATE=str(self.state),
            ATTN_EXCHANGE_PORT=str(self.exchange_port),
            ATTN_MEM_LIMIT=f"{MEMORY_LIMIT_MIB}M",
            ATTN_EXCHANGE_QUOTA_MIB=str(EXCHANGE_QUOTA_MIB),
            PYTHONUNBUFFERED="1",
            **_library_path(),
        )
        cmd = [
            str(ENV / "bin" / "jupyterhub"),
            "-f",
            str(HUB_FILES / "jupyterhub_config.py"),
            f"--JupyterHub.hub_port={free_port()}",
            f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{free_port()}",
        ]
        started = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd="/",
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
                    if response.status == 200 and self._exchange_up():
                        return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"the hub did not answer within {timeout} s:\n{self.log_tail()}")

    def _exchange_up(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.exchange}api/{COURSE_ID}/view", timeout=5)
        except urllib.error.HTTPError:
            return True  # it answers (403 without a token)
        except OSError:
            return False
        return True

    def log_tail(self, n=80):
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def remember(self):
        if self.proc is not None:
            self.known.update(_descendants(self.proc.pid))

    def server_pid(self, learner) -> int:
        """The pid of ``learner``'s single-user server."""
        for pid in _descendants(self.proc.pid):
            if f"/user/{learner}/" in _environ(pid).get("JUPYTERHUB_SERVICE_PREFIX", ""):
                return pid
        raise AssertionError(f"no server for {learner}")

    def stop(self):
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


def _environ(pid) -> dict:
    try:
        items = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return {}
    return dict(item.decode(errors="replace").split("=", 1) for item in items if b"=" in item)


def _rss(pid) -> int:
    try:
        match = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    except OSError:
        return 0
    return int(match.group(1)) * 1024 if match else 0


def _server_memory(hub: Hub, learner: str) -> int:
    """Resident bytes of a learner's server and everything it started (its kernels)."""
    pid = hub.server_pid(learner)
    return sum(_rss(p) for p in [pid, *_descendants(pid)])


def _memory_group(pid) -> Path | None:
    """The cgroup (v2, or v1's memory controller) that holds ``pid``."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            return Path("/sys/fs/cgroup") / path.lstrip("/")
        if "memory" in controllers.split(","):
            for mount in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
                candidate = Path(mount) / path.lstrip("/")
                if (candidate / "memory.limit_in_bytes").exists():
                    return candidate
    return None


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

# run code in a new kernel of the learner's server, over the kernel's websocket, as a notebook does
_EXECUTE_JS = """async ([base, code, timeoutMs]) => {
  const xsrf = decodeURIComponent((document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || '');
  const made = await fetch(base + '/api/kernels', {method: 'POST', credentials: 'same-origin',
    headers: {'X-XSRFToken': xsrf, 'Content-Type': 'application/json'}, body: JSON.stringify({name: 'python3'})});
  const kernel = await made.json();
  const ws = new WebSocket(location.origin.replace(/^http/, 'ws') + base + '/api/kernels/' + kernel.id + '/channels');
  const started = Date.now();
  return await new Promise(resolve => {
    const out = [];
    let reply = null, idle = false;
    const done = status => {
      clearTimeout(timer);
      resolve({kernel: kernel.id, status, out, ms: Date.now() - started});
    };
    const timer = setTimeout(() => done('timeout'), timeoutMs);
    ws.onopen = () => ws.send(JSON.stringify({
      header: {msg_id: 'run-1', username: '', session: 'test', msg_type: 'execute_request', version: '5.3',
               date: new Date().toISOString()},
      parent_header: {}, metadata: {}, channel: 'shell', buffers: [],
      content: {code, silent: false, store_history: false, user_expressions: {}, allow_stdin: false,
                stop_on_error: true}}));
    ws.onmessage = event => {
      const m = JSON.parse(event.data);
      if (m.msg_type === 'status' && ['dead', 'restarting', 'autorestarting'].includes(m.content.execution_state)) {
        done('died');
      }
      if (!m.parent_header || m.parent_header.msg_id !== 'run-1') return;
      if (m.msg_type === 'stream') out.push(m.content.text);
      if (m.msg_type === 'error') out.push(m.content.ename + ': ' + m.content.evalue);
      // shell and iopub are not ordered against each other: a request's outputs are all in only once iopub
      // says idle for it, so the answer waits for both the reply and that idle
      if (m.msg_type === 'execute_reply') reply = m.content.status;
      if (m.msg_type === 'status' && m.content.execution_state === 'idle') idle = true;
      if (reply !== null && idle) done(reply);
    };
    ws.onclose = () => done('closed');
  });
}"""


def _api(page, method, path, body=None, form=None, expect_ok=True):
    answer = page.evaluate(_API_JS, [method, path, body, form])
    if expect_ok:
        assert answer["status"] < 400, f"{method} {path}: {answer['status']} {answer['text'][:500]}"
    return json.loads(answer["text"]) if answer["text"] and answer["status"] < 400 else answer


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


def _lab_settings(accounts: Accounts, learner: str):
    """The browser test's JupyterLab settings in a learner's home (every cell in the page; no news pop-up)."""
    folder = accounts.home(learner) / ".jupyter"
    for plugin, values in LAB_SETTINGS.items():
        path = folder / "lab" / "user-settings" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    accounts.give(learner, folder)


def _log_in(page, hub: Hub, name: str, password: str, lands=True):
    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", password)
    page.click("input[type=submit], button[type=submit]")
    if lands:  # the hub starts the server, then JupyterLab opens the course's index (the spawner's default URL)
        page.wait_for_url(re.compile(rf"/user/{name}/lab/tree/attention-by-hand/notebooks/README\.md"), timeout=180_000)
        page.locator(".jp-RenderedMarkdown h1", has_text="The course notebooks").first.wait_for(timeout=120_000)


def _answer(fetched: dict, learner: str) -> dict:
    """The fetched notebook with the learner's code in its solution cells."""
    solution = {c.id: c for c in nbformat.read(str(ROOT / "solutions" / f"{MHA}.ipynb"), as_version=4).cells}
    nb = nbformat.from_dict(fetched)
    for cell in nb.cells:
        if learner == BOB or not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        code = "\n".join(line for line in solution[cell.id].source.split("\n") if line.strip() not in MARKERS)
        if learner == CAROL and cell.id == "solution":
            assert code.count(CAROL_SLIP[0]) == 1
            code = code.replace(*CAROL_SLIP)
        cell.source = code
    return nb


# ---------------------------------------------------------------------------------------------------- the exchange


def _exchange(hub: Hub, method: str, path: str, token: str | None, body: dict | None = None):
    """(status, answer) of a request to the exchange service, as anyone on the machine can send one."""
    request = urllib.request.Request(
        f"{hub.exchange}api/{COURSE_ID}/{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **({"Authorization": f"token {token}"} if token else {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, None


def _can_read(accounts: Accounts, who: str, path: Path) -> bool:
    return accounts.run(who, ["cat", str(path)], check=False).returncode == 0 or (
        path.is_dir() and accounts.run(who, ["ls", str(path)], check=False).returncode == 0
    )


# ---------------------------------------------------------------------------------------------------- the test


def test_a_workshop_on_jupyterhub_that_learners_cannot_cheat(tmp_path):
    numbers = {}
    with Accounts([*LEARNERS, TEACHER]) as accounts:
        hub = Hub(tmp_path)
        try:
            numbers["hub start, exchange service included (s)"] = round(hub.start(), 1)
            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=chromium_path(),
                    headless=True,
                    args=CHROMIUM_ARGS,
                    env=chromium_env(tmp_path / "chromium"),
                )
                try:
                    _workshop(browser, hub, accounts, numbers)
                finally:
                    browser.close()
        except BaseException:
            print(hub.log_tail(), file=sys.stderr)
            raise
        finally:
            left = hub.stop()
    print("\nworkshop numbers:", json.dumps(numbers, indent=1))
    assert not left, f"processes outlived the hub: {left}"


def _workshop(browser, hub: Hub, accounts: Accounts, numbers: dict):
    # the instructor: a token from the hub (its Token page does the same), then generate and release
    context = browser.new_context()
    page = context.new_page()
    _log_in(page, hub, TEACHER, accounts.passwords[TEACHER])
    page.goto(f"{hub.url}/hub/token")  # the hub's own page, whose XSRF cookie the hub's API checks
    teacher_token = _api(page, "POST", f"/hub/api/users/{TEACHER}/tokens", body={"note": "nbgrader"})["token"]
    context.close()
    teacher_env = {
        "PATH": f"{ENV / 'bin'}:/usr/bin:/bin",
        "JUPYTERHUB_API_TOKEN": teacher_token,
        "ATTN_EXCHANGE_URL": hub.exchange,
        "JUPYTER_CONFIG_PATH": str(HUB_FILES),
        "OMP_NUM_THREADS": "1",
        "ATTN_HISTORY": "off",
        **_library_path(),
    }
    course = accounts.home(TEACHER) / "course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    shutil.copy(ROOT / "instructors" / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copy(ROOT / "solutions" / f"{MHA}.ipynb", course / "source" / ASSIGNMENT / f"{MHA}.ipynb")
    accounts.give(TEACHER, course)

    def nbgrader(*args):
        return accounts.run(TEACHER, ["nbgrader", *args], env=teacher_env, cwd=course)

    nbgrader("generate_assignment", ASSIGNMENT, "--force")
    nbgrader("release_assignment", ASSIGNMENT, "--force")

    # three learners: log in, run notebook 01, fetch, answer, submit
    pages = {}
    for learner in LEARNERS:
        _lab_settings(accounts, learner)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(60_000)
        page = context.new_page()
        started = time.monotonic()
        _log_in(page, hub, learner, accounts.passwords[learner])
        numbers[f"{learner}: log in to the index (s)"] = round(time.monotonic() - started, 1)
        home = accounts.home(learner)
        assert (home / "attention-by-hand" / "exercises").is_dir()
        assert not (home / "attention-by-hand" / "solutions").exists()
        server = hub.server_pid(learner)
        assert Path(f"/proc/{server}").stat().st_uid == pwd.getpwnam(learner).pw_uid, "the server runs as its learner"
        assert str(ROOT) not in json.dumps(_environ(server)), "a learner's environment names the instructor's clone"

        nb = nbformat.read(str(ROOT / "notebooks" / NOTEBOOK), as_version=4)
        code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
        open_notebook(page, _Lab(hub.url, learner), f"attention-by-hand/notebooks/{NOTEBOOK}", len(nb.cells))
        run_all_cells(page)
        cells = wait_until_run(page, code)["cells"]
        errors = [(i, c["stderr"][:1]) for i, c in enumerate(cells) if c["stderr"]]
        assert not errors, f"{learner}: {NOTEBOOK} failed in the hub: {errors}"
        numbers[f"{learner}: memory, server and kernel (MiB)"] = _server_memory(hub, learner) >> 20

        base = f"/user/{learner}"
        assert any(a["status"] == "fetched" for a in _assignments(page, "fetch", learner))
        path = f"{ASSIGNMENT}/{MHA}.ipynb"
        fetched = _api(page, "GET", f"{base}/api/contents/{path}?content=1")["content"]
        answer = json.loads(nbformat.writes(_answer(fetched, learner)))
        _api(page, "PUT", f"{base}/api/contents/{path}", body={"type": "notebook", "format": "json", "content": answer})
        listed = _assignments(page, "submit", learner)
        assert any(a["status"] == "submitted" for a in listed), f"{learner}: nothing submitted: {listed}"
        hub.remember()
        pages[learner] = (context, page)

    _attacks(hub, accounts, pages, teacher_token, course, numbers)

    # the instructor collects (one submission per learner, each under its own name), autogrades, gives feedback
    nbgrader("collect", ASSIGNMENT)
    assert sorted(p.name for p in (course / "submitted").iterdir()) == sorted(LEARNERS)
    started = time.monotonic()
    nbgrader("autograde", ASSIGNMENT, "--force")
    numbers["autograde, 3 learners (s)"] = round(time.monotonic() - started, 1)
    nbgrader("generate_feedback", ASSIGNMENT, "--force")
    nbgrader("release_feedback", ASSIGNMENT)
    scores = _scores(accounts, teacher_env, course)
    assert scores[ALICE] == scores["max"] > 0, scores
    assert scores[BOB] == 0, scores
    assert 0 < scores[CAROL] < scores["max"], scores

    # each learner fetches their own feedback, through their own server, and sees nobody else's
    for learner in LEARNERS:
        context, page = pages[learner]
        _assignments(page, "fetch_feedback", learner)
        (feedback,) = (accounts.home(learner) / ASSIGNMENT / "feedback").glob(f"*/{MHA}.html")
        text = feedback.read_text(encoding="utf-8")
        got, worth = map(float, re.search(r"\(Score: ([\d.]+) / ([\d.]+)\)", text).groups())
        assert (got, worth) == pytest.approx((scores[learner], scores["max"]), abs=0.01), learner
        if learner == CAROL:
            assert "√head_dim" in text  # the grader's diagnosis reaches the learner
        token = _environ(hub.server_pid(learner))["JUPYTERHUB_API_TOKEN"]
        status, view = _exchange(hub, "GET", "view", token)
        assert status == 200 and len(view["feedback"]) == 1, f"{learner} sees feedback not theirs: {view['feedback']}"
        context.close()


def _attacks(hub: Hub, accounts: Accounts, pages: dict, teacher_token: str, course: Path, numbers: dict):
    tried = {}
    bob_env = _environ(hub.server_pid(BOB))  # what bob has in a terminal of his server
    bob_token = bob_env["JUPYTERHUB_API_TOKEN"]
    status, before = _exchange(hub, "GET", "view", teacher_token)
    alice_submission = next(n for n in before["inbound"] if n.startswith(f"{ALICE}+"))

    # 1. submit as alice: the student id from the environment and from the command line
    assignment_dir = accounts.home(BOB) / ASSIGNMENT
    proc = accounts.run(
        BOB,
        ["nbgrader", "submit", ASSIGNMENT, f"--student={ALICE}", f"--course={COURSE_ID}"],
        env={**bob_env, "JUPYTERHUB_USER": ALICE},
        cwd=assignment_dir.parent,
        check=False,
    )
    status, after = _exchange(hub, "GET", "view", teacher_token)
    alices = [n for n in after["inbound"] if n.startswith(f"{ALICE}+")]
    bobs = [n for n in after["inbound"] if n.startswith(f"{BOB}+")]
    assert alices == [alice_submission] and after["inbound"][alice_submission] == before["inbound"][alice_submission]
    assert len(bobs) == 2 or proc.returncode != 0, "bob's submission under alice's name was filed as neither"
    tried["bob submits as alice (JUPYTERHUB_USER, --student)"] = "filed as bob's own" if len(bobs) == 2 else "refused"

    # 2. the exchange without a token, with a token that is no user's, and bob's token doing an instructor's work
    files = [{"path": "timestamp.txt", "content": base64.b64encode(b"2020-01-01 00:00:00.000000 UTC").decode()}]
    assert _exchange(hub, "GET", "view", None)[0] == 403
    assert _exchange(hub, "GET", "view", "not-a-token")[0] == 403
    assert _exchange(hub, "PUT", f"outbound/{ASSIGNMENT}", bob_token, {"files": files})[0] == 403
    assert _exchange(hub, "PUT", f"feedback/{ALICE}", bob_token, {"files": []})[0] == 403
    status, bob_view = _exchange(hub, "GET", "view", bob_token)
    assert status == 200 and not bob_view["instructor"]
    assert all(n.startswith(f"{BOB}+") for n in bob_view["inbound"]), "bob sees submissions not his"
    tried["bob's token: release, feedback for alice, others' submissions"] = "403 / only his own shown"

    # 2b. bob fills the exchange: his own notebook again and again with padding (each one a valid submission)
    def resubmit(pad_mib: int):
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f %Z")
        files = [f for f in bob_view["inbound"][max(bob_view["inbound"])] if f["path"] != "timestamp.txt"]
        files += [
            {"path": "timestamp.txt", "content": base64.b64encode(now.encode()).decode()},
            {"path": "padding.bin", "content": base64.b64encode(bytes(pad_mib << 20)).decode()},
        ]
        return _exchange(hub, "POST", f"inbound/{ASSIGNMENT}", bob_token, {"files": files})

    def kept(view, learner):
        return sorted(n for n in view["inbound"] if n.startswith(f"{learner}+{ASSIGNMENT}+"))

    assert [resubmit(1)[0] for _ in range(EXCHANGE_KEEP + 2)] == [200] * (EXCHANGE_KEEP + 2)
    status, flooded = _exchange(hub, "GET", "view", teacher_token)
    assert len(kept(flooded, BOB)) == EXCHANGE_KEEP, kept(flooded, BOB)
    status, refusal = resubmit(EXCHANGE_QUOTA_MIB // 2 + 1)  # with the 4 newest kept: over the quota
    assert status == 413 and f"more than the {EXCHANGE_QUOTA_MIB} MiB a learner may keep" in refusal["error"], refusal
    # the same through nbgrader, as bob meets it: a refusal that says why
    padding = assignment_dir / "padding.bin"
    accounts.run(BOB, ["truncate", "-s", f"{EXCHANGE_QUOTA_MIB // 2 + 1}M", str(padding)])
    proc = accounts.run(BOB, ["nbgrader", "submit", ASSIGNMENT], env=bob_env, cwd=assignment_dir.parent, check=False)
    accounts.run(BOB, ["rm", str(padding)])
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "413 your submissions to this course would take" in said, said[-3000:]
    status, after = _exchange(hub, "GET", "view", teacher_token)
    assert kept(after, BOB) == kept(flooded, BOB), "a refused submission changed what bob had"
    assert after["inbound"][alice_submission] == before["inbound"][alice_submission]
    tried["bob submits again and again, 1 MiB padded, then 5 MiB"] = (
        f"his newest {EXCHANGE_KEEP} kept; past {EXCHANGE_QUOTA_MIB} MiB refused (413, nbgrader submit says why); "
        "alice's intact"
    )

    # 3. reading what is not his: alice's home (her answer, her submission's cache, her feedback), the exchange's
    # store and the hub's state, the instructor's course folder (the solutions, the gradebook)
    for target in (
        accounts.home(ALICE),
        accounts.home(ALICE) / ASSIGNMENT / f"{MHA}.ipynb",
        hub.state,
        hub.state / "exchange",
        hub.state / "jupyterhub.sqlite",
        course / "source" / ASSIGNMENT / f"{MHA}.ipynb",
        course / "gradebook.db",
    ):
        assert not _can_read(accounts, BOB, target), f"bob can read {target}"
    tried["bob reads alice's home, the exchange store, the hub's state, the instructor's course"] = "permission denied"

    # 4. no solution anywhere a learner can reach: the hub's folder and every learner's home
    reachable = [PREFIX / "course", PREFIX / "hub", *(accounts.home(n) for n in LEARNERS)]
    for folder in reachable:
        assert not list(folder.rglob("solutions")), f"a solutions folder in {folder}"
        for path in folder.rglob("*.ipynb"):
            assert MARKERS[0] not in path.read_text(errors="replace"), f"{path} holds a solution"
    tried["solutions anywhere learners can read"] = "none found"

    # 5. bob's kernel takes more memory than a learner may: it is stopped, alice's kernel goes on
    bob_page = pages[BOB][1]
    hog = f"blocks = []\nfor _ in range({HOG_MIB // 64}):\n    blocks.append(b'x' * (64 << 20))\nprint('held')"
    result = bob_page.evaluate(_EXECUTE_JS, [f"/user/{BOB}", hog, 120_000])
    assert result["status"] in ("died", "closed", "error") and "held" not in "".join(result["out"]), result
    group = _memory_group(hub.server_pid(BOB)) if result["status"] != "closed" else None
    peak = (
        int((group / "memory.max_usage_in_bytes").read_text())
        if group and (group / "memory.max_usage_in_bytes").exists()
        else None
    )
    if group and (group / "memory.peak").exists():
        peak = int((group / "memory.peak").read_text())
    if peak is not None:
        assert peak <= MEMORY_LIMIT_MIB << 20, f"bob's group reached {peak >> 20} MiB past its {MEMORY_LIMIT_MIB} MiB"
    alice = pages[ALICE][1].evaluate(_EXECUTE_JS, [f"/user/{ALICE}", "print(6 * 7)", 120_000])
    assert alice["status"] == "ok" and "42" in "".join(alice["out"]), alice
    numbers["memory limit per learner"] = (
        f"{MEMORY_LIMIT_MIB} MiB by {'a cgroup' if group else 'the watchdog'}: bob's kernel asking for {HOG_MIB} MiB "
        f"was stopped ({result['status']}, {result['ms'] / 1000:.1f} s)"
        + (f", his group's peak {peak >> 20} MiB" if peak else "")
        + "; alice's kernel ran on"
    )
    tried["bob's kernel asks for more than the memory limit"] = numbers["memory limit per learner"]
    numbers["attacks tried"] = tried


def _scores(accounts: Accounts, env: dict, course: Path) -> dict:
    """Each learner's score on exercise 04 and its maximum, read from nbgrader's gradebook."""
    script = (
        "import json, sys\nfrom nbgrader.api import Gradebook\n"
        "with Gradebook('sqlite:///gradebook.db', course_id=sys.argv[1]) as gb:\n"
        "    subs = gb.assignment_submissions(sys.argv[2])\n"
        "    print(json.dumps({s.student_id: s.score for s in subs} | "
        "{'max': gb.find_assignment(sys.argv[2]).max_score}))\n"
    )
    proc = accounts.run(TEACHER, ["python", "-c", script, COURSE_ID, ASSIGNMENT], env=env, cwd=course)
    return json.loads(proc.stdout)

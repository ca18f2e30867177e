"""Drive the course notebooks in a real JupyterLab with headless Chromium (Playwright, no browser download).

``LabServer`` serves a private copy of the repository (so running the notebooks never touches the committed
files) with its own settings, runtime and data folders, and stops every process it started, kernels included.
The page helpers below open a notebook, run all cells and read back what the learner would see.
"""

from __future__ import annotations

import atexit
import contextlib
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

ROOT = Path(__file__).resolve().parents[2]
SKIP_REASON = "browser test skipped: run `make test-browser` (needs Debian's chromium: apt-get install chromium)"

# Headless flags that work in a sandboxed container with a closed network: without the background-networking
# ones Chromium keeps dialing out and stalls.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-breakpad",
    "--disable-crash-reporter",
]


def chromium_env(home: Path):
    """Chromium's environment: its config and cache folders (crash reports included) under ``home``."""
    env = dict(os.environ)
    env.update(XDG_CONFIG_HOME=str(home / "config"), XDG_CACHE_HOME=str(home / "cache"))
    return env


# JupyterLab user settings of the tests, on top of the learner's (lab_settings): no autosave, every cell in the DOM
# (the default windowing leaves off-screen cells out), and a notebook whose kernel exists starts without a dialog.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none", "autoStartDefaultKernel": True},
    "@jupyterlab/apputils-extension/sessionDialogs": {"skipKernelRestartDialog": True},
}


def lab_settings() -> dict:
    """The user settings the server runs with: the learner's (etc/lab/overrides.json, which make setup installs:
    Markdown opens as a preview, no news) under the test's own (LAB_SETTINGS)."""
    overrides = json.loads((ROOT / "etc" / "lab" / "overrides.json").read_text(encoding="utf-8"))
    merged = {plugin.replace(":", "/"): dict(values) for plugin, values in overrides.items()}
    for plugin, values in LAB_SETTINGS.items():
        merged.setdefault(plugin, {}).update(values)
    return merged


def browser_tests_wanted():
    return os.environ.get("RUN_BROWSER_TESTS", "") not in ("", "0")


def skip_unless_browser_tests():
    """At the top of a browser test module: skip it, saying why, unless RUN_BROWSER_TESTS=1 and Chromium and
    playwright are there; in CI (CI=true) a missing Chromium is an error instead."""
    import importlib.util

    import pytest

    if not browser_tests_wanted() or chromium_path() is None:
        if browser_tests_wanted() and os.environ.get("CI", "").lower() in ("1", "true"):
            raise RuntimeError("CI asked for the browser test (RUN_BROWSER_TESTS=1) but `chromium` is not on PATH")
        pytest.skip(SKIP_REASON, allow_module_level=True)
    if importlib.util.find_spec("playwright") is None:
        pytest.skip(
            "browser test skipped: the playwright package is missing; run `make setup`", allow_module_level=True
        )


def notebooks_dir():
    # COURSE_NOTEBOOKS_DIR points the harness at another folder of notebooks (used to test the harness itself)
    return Path(os.environ.get("COURSE_NOTEBOOKS_DIR", ROOT / "notebooks")).resolve()


def chromium_path():
    return shutil.which("chromium")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    # the server must not outlive a killed test run; PR_SET_PDEATHSIG = 1 (Linux only, best effort)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


# left out of the server's copy of the repository: version control, environments, caches, outputs
COPY_IGNORE = (
    ".git",
    ".venv",
    "__pycache__",
    ".ipynb_checkpoints",
    "*.egg-info",
    ".pytest_cache",
    "screenshots",
    "grades",
    "build",
    "submissions",
)


def _copy_ignore(directory, names):
    skip = set(shutil.ignore_patterns(*COPY_IGNORE)(directory, names))
    return skip | {n for n in names if (Path(directory) / n / "pyvenv.cfg").exists()}  # any virtual env


class LabServer:
    """``jupyter lab`` on 127.0.0.1, a free port and a random token, serving a copy of the repository.

    The copy keeps the layout the notebooks may rely on (one finds benchmarks/ above its folder), and
    whatever running them writes (the notebooks themselves included) stays in the copy.
    """

    SERVER_CONFIG = ("jupyter_server_config.json", "jupyter_server_config.py")

    def __init__(
        self, workdir: Path, repo: Path, notebooks: Path, settings: dict | None = None, server_config=SERVER_CONFIG
    ):
        self.workdir = Path(workdir)
        self.root = self.workdir / "root"
        shutil.copytree(repo, self.root, ignore=_copy_ignore)
        try:
            self.notebooks_rel = notebooks.resolve().relative_to(repo.resolve()).as_posix()
        except ValueError:  # a folder outside the repository: copied next to it
            self.notebooks_rel = notebooks.name
            shutil.copytree(notebooks, self.root / notebooks.name, ignore=_copy_ignore, dirs_exist_ok=True)
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.workdir / "jupyter-lab.log"
        self.proc = None
        self._known = {}  # pid -> start time of every descendant seen (kernels), to stop them for sure
        self.server_config = tuple(server_config)  # files of etc/jupyter the server reads
        self.settings = lab_settings()  # ``settings`` (plugin -> values) on top, e.g. autosave back on
        for plugin, values in (settings or {}).items():
            self.settings.setdefault(plugin, {}).update(values)

    def start(self, timeout=90):
        settings = self.workdir / "settings"
        for plugin, values in self.settings.items():
            path = settings / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = dict(os.environ)
        for name in ("config", "runtime", "data", "ipython"):
            (self.workdir / name).mkdir(exist_ok=True)
        # the server settings make setup installs (etc/jupyter), as a learner's make lab reads them
        for config in self.server_config:
            shutil.copy(ROOT / "etc" / "jupyter" / config, self.workdir / "config")
        # private Jupyter folders: nothing read from or written to the user's home, and a kernel name that
        # exists only on one machine fails here as it would for a learner
        env.update(
            JUPYTER_CONFIG_DIR=str(self.workdir / "config"),
            JUPYTER_RUNTIME_DIR=str(self.workdir / "runtime"),
            JUPYTER_DATA_DIR=str(self.workdir / "data"),
            IPYTHONDIR=str(self.workdir / "ipython"),
            JUPYTER_PLATFORM_DIRS="1",
            PYTHONUNBUFFERED="1",
        )
        env.pop("MPLBACKEND", None)  # a non-inline backend would hide every plot
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root}",
            f"--LabApp.user_settings_dir={settings}",
            f"--LabApp.workspaces_dir={self.workdir / 'workspaces'}",
            "--LabApp.extension_manager=readonly",
            "--ServerApp.terminals_enabled=False",
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the page helpers ask it what is open
            # the server's config files from the private folder alone: without this Jupyter reads them from the
            # environment's etc/jupyter too (make setup's copy), and a server meant to run without the Python config
            # would run with it (its extensions' config.d folders are still read from the environment)
            f"--ServerApp.config_file={self.workdir / 'config' / 'jupyter_server_config.json'}",
        ]
        if os.geteuid() == 0:  # CI containers run as root
            cmd.append("--allow-root")
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.api("GET", "/api/status")
                return self
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"jupyter lab did not answer within {timeout} s:\n{self.log_tail()}")

    def log_tail(self, n=40):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def api(self, method, path, body=None, timeout=10):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path, method=method, data=data, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def url(self, notebook_rel):
        # ?reset: start from an empty workspace, so the previous notebook does not reopen
        return f"{self.base_url}/lab/tree/{notebook_rel}?reset&token={self.token}"

    def shutdown_kernels(self):
        """Stop every kernel (frees CPU and memory between notebooks); returns how many were running."""
        self._remember_descendants()
        kernels = self._kernels()
        for kernel in kernels:
            try:
                self.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=30)
            except urllib.error.HTTPError as exc:
                if exc.code != 404:  # 404: it ended on its own meanwhile
                    raise
        return len(kernels)

    def _kernels(self, tries=5):
        """The server's kernels. A kernel that a notebook's view is starting, or ending, while they are listed can
        make the server answer 500 for that moment: asked again, it answers."""
        for _ in range(tries - 1):
            try:
                return self.api("GET", "/api/kernels")
            except urllib.error.HTTPError as exc:
                if exc.code < 500:
                    raise
            time.sleep(0.5)
        return self.api("GET", "/api/kernels")

    def _remember_descendants(self):
        if self.proc is not None:
            self._known.update(_descendants(self.proc.pid))

    def stop(self, grace=15):
        """Stop the server and everything it started (kernels run in sessions of their own); returns the
        pids still alive afterwards, which should be none."""
        if self.proc is None:
            return []
        self._remember_descendants()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
                self.proc.wait(grace)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        for _ in range(50):
            if not _alive(self._known):
                break
            time.sleep(0.1)
        for pid in _alive(self._known):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait(10)
        time.sleep(0.2)
        left, self.proc = sorted(_alive(self._known)), None
        atexit.unregister(self.stop)
        return left

    @contextlib.contextmanager
    def running(self):
        """The server started, then stopped on the way out; no process it started may outlive the stop."""
        try:
            self.start()
            yield self
        finally:
            left = self.stop()
        assert not left, f"processes survived the server's shutdown: {left}"


def _processes():
    """pid -> (parent pid, start time) of every live process, read from /proc (Linux)."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":  # a zombie has exited already
            table[int(stat.parent.name)] = (int(fields[1]), fields[19])
    return table


def _descendants(pid):
    """pid -> start time of every descendant of ``pid`` (the start time tells a reused pid apart)."""
    table, found, todo = _processes(), {}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, start) in table.items():
            if ppid == parent and child not in found:
                found[child] = start
                todo.append(child)
    return found


def _alive(known):
    table = _processes()
    return [pid for pid, start in known.items() if pid in table and table[pid][1] == start]


# --- the page side ---------------------------------------------------------------------------------------

CELL_SELECTOR = ".jp-NotebookPanel .jp-Notebook .jp-Cell"

# status of every cell, by position in the notebook: prompt text, errors, stderr, images, widgets
_SNAPSHOT_JS = """(selector) => {
  const cells = [...document.querySelectorAll(selector)];
  const indicator = document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator');
  return {
    kernel: indicator ? indicator.getAttribute('data-status') : null,
    cells: cells.map(cell => {
      const outputs = cell.querySelector('.jp-Cell-outputArea') || cell;
      const text = sel => [...outputs.querySelectorAll(sel)].map(e => e.innerText.slice(-20000));
      return {
        code: cell.classList.contains('jp-CodeCell'),
        prompt: (cell.querySelector('.jp-InputArea-prompt') || {}).innerText || '',
        // JupyterLab 4 renders tracebacks and stderr streams alike, as application/vnd.jupyter.stderr
        stderr: text('[data-mime-type="application/vnd.jupyter.stderr"],'
                     + ' [data-mime-type="application/vnd.jupyter.error"]'),
        images: [...outputs.querySelectorAll('.jp-RenderedImage img, .jp-RenderedSVG img, .jp-RenderedSVG svg')]
          .map(img => ({ok: img.tagName.toLowerCase() === 'svg' || (img.complete && img.naturalWidth > 0),
                        src: img.getAttribute('src') || ''})),
        widgets: outputs.querySelectorAll('.jupyter-widgets.widget-inline-hbox, .jupyter-widgets.widget-box, '
          + '.jupyter-widgets.widget-hbox, .jupyter-widgets.widget-vbox, .widget-slider, .widget-dropdown').length,
        // on-screen width of each slider's track: a squeezed slider cannot be dragged
        sliderWidths: [...outputs.querySelectorAll('.widget-slider .slider-container')]
          .map(e => Math.round(e.getBoundingClientRect().width)),
        widgetErrors: [...outputs.querySelectorAll('.jp-OutputArea-output')]
          .map(e => e.innerText).filter(t => /Error displaying widget|Loading widget\\.\\.\\./.test(t)),
      };
    }),
  };
}"""


def snapshot(page):
    return page.evaluate(_SNAPSHOT_JS, CELL_SELECTOR)


def open_notebook(page, server, notebook_rel, num_cells, timeout_s=90):
    """Open a notebook and wait until all its cells are shown and its kernel is started and idle."""
    page.goto(server.url(notebook_rel))
    deadline = time.monotonic() + timeout_s
    while True:
        state = page.evaluate(
            """(selector) => ({
          cells: document.querySelectorAll(selector).length,
          kernel: (document.querySelector('.jp-NotebookPanel-toolbar .jp-KernelName') || {}).innerText || '',
          status: (document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator')
                   || {getAttribute: () => null}).getAttribute('data-status'),
          dialog: (document.querySelector('.jp-Dialog') || {}).innerText || ''})""",
            CELL_SELECTOR,
        )
        if state["dialog"]:
            raise AssertionError(f"JupyterLab asks: {state['dialog'][:300]!r} (does the notebook's kernel exist?)")
        if state["cells"] == num_cells and state["kernel"] not in ("", "No Kernel") and state["status"] == "idle":
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(f"notebook not ready after {timeout_s} s: {state}")
        page.wait_for_timeout(250)


def _menu(page, menu, command):
    page.locator(".lm-MenuBar-itemLabel", has_text=menu).first.click(timeout=15_000)
    page.locator(f'.lm-Menu-item[data-command="{command}"]').click(timeout=15_000)


def run_all_cells(page, timeout_s=30):
    """Edit > Clear Outputs of All Cells, then Run > Run All Cells, through the menus as a learner would.

    Clearing first means every output and execution count checked afterwards comes from this run, not from
    the committed file.
    """
    _menu(page, "Edit", "editmenu:clear-all")
    deadline = time.monotonic() + timeout_s
    while True:
        cells = snapshot(page)["cells"]
        if not any(c["code"] and any(ch.isdigit() for ch in c["prompt"]) for c in cells):
            break
        if time.monotonic() > deadline:
            raise TimeoutError("Clear Outputs of All Cells left execution counts behind")
        page.wait_for_timeout(100)
    _menu(page, "Run", "runmenu:run-all")


def wait_until_run(page, code_cells, timeout_s=180):
    """Wait until every non-empty code cell shows an execution count, or an error stopped the run, and the
    kernel is idle. Returns the last snapshot; raises TimeoutError with the stuck cells otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        snap = snapshot(page)
        prompts = [snap["cells"][i]["prompt"] if i < len(snap["cells"]) else "" for i in code_cells]
        busy = any("*" in p for p in prompts)
        done = all(any(ch.isdigit() for ch in p) for p in prompts)
        failed = any(c["stderr"] for c in snap["cells"])  # a traceback stops Run All
        if not busy and (done or failed) and snap["kernel"] == "idle":
            return _settled(page)
        if time.monotonic() > deadline:
            stuck = [i for i, p in zip(code_cells, prompts, strict=False) if not any(ch.isdigit() for ch in p)]
            raise TimeoutError(f"cells still not run after {timeout_s} s (kernel {snap['kernel']}): {stuck}")
        page.wait_for_timeout(250)


# images decode and widget views render a moment after the kernel went idle
_SETTLED_JS = """() => [...document.querySelectorAll('.jp-NotebookPanel .jp-RenderedImage img')]
    .every(i => i.complete) && ![...document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output')]
    .some(e => e.innerText.includes('Loading widget...'))"""


def _settled(page, timeout_ms=15_000):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(_SETTLED_JS, timeout=timeout_ms)
    except PlaywrightTimeout:
        pass  # the checks on the snapshot name what did not render
    return snapshot(page)


def change_widget(cell):
    """Change the first control in ``cell`` (a Playwright locator) to another value; returns a description.

    Sliders move by keyboard (ArrowRight, or ArrowLeft at the maximum); dropdowns, toggle buttons, check
    boxes and radio buttons pick another option.
    """
    handle = cell.locator(".widget-slider .noUi-handle").first
    if handle.count():
        readout = cell.locator(".widget-slider .widget-readout").first
        before = readout.inner_text() if readout.count() else None
        handle.focus()
        handle.press("ArrowRight")
        if readout.count() and readout.inner_text() == before:  # already at the maximum
            handle.press("ArrowLeft")
            handle.press("ArrowLeft")
        after = readout.inner_text() if readout.count() else None
        return f"slider {before} -> {after}"
    select = cell.locator(".widget-dropdown select").first
    if select.count():
        values = select.locator("option").evaluate_all("os => os.map(o => o.value)")
        current = select.input_value()
        other = next((v for v in values if v != current), None)
        if other is None:
            raise AssertionError("the dropdown has a single option")
        select.select_option(other)
        return f"dropdown {current!r} -> {other!r}"
    toggles = cell.locator(".widget-toggle-buttons button:not(.mod-active)").first
    if toggles.count():
        label = toggles.inner_text()
        toggles.click()
        return f"toggle button {label!r}"
    box = cell.locator(".jupyter-widgets input[type=checkbox], .jupyter-widgets input[type=radio]:not(:checked)").first
    if box.count():
        box.click()
        return "check box or radio button"
    raise AssertionError("no slider, dropdown, toggle button, check box or radio button to change")


def notebook_expectations(path: Path):
    """From the committed file: kernel name, positions of the non-empty code cells, cells allowed to raise,
    and how many image outputs the committed run produced."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    code, raises, images = [], set(), 0
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        if "".join(cell["source"]).strip():
            code.append(i)
        if "raises-exception" in cell.get("metadata", {}).get("tags", []):
            raises.add(i)
        images += sum(any(k.startswith("image/") for k in out.get("data", {})) for out in cell.get("outputs", []))
    return {
        "kernel": nb.get("metadata", {}).get("kernelspec", {}).get("name"),
        "code_cells": code,
        "raises": raises,
        "images": images,
        "num_cells": len(nb["cells"]),
    }

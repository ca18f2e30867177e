"""Opening and reading a notebook in JupyterLab leaves the learner's checkout clean.

JupyterLab writes the kernel it starts into the notebook it opens (the kernelspec's display name, ``language_info``
with the kernel's Python version) and autosaves a changed notebook. A notebook committed with other names is
rewritten by merely reading it: `git status` shows it modified and `git pull` refuses to update.

Here the server's copy of the repository is a git checkout, autosave runs every AUTOSAVE_S seconds instead of two
minutes, and notebooks of each kind (a notebook, a twin, an exercise, a solution) are opened and left open past
several autosaves; `git status` must stay empty. Twice:

* with only the JSON server config: the committed files alone must be right (where a deployment lacks etc/jupyter's
  Python config). A control committed with the old display name "Python 3" is read first and must come out
  modified: proof that this server's autosave rewrites a notebook whose kernel names differ, before the others
  are held to staying clean;
* with the server config `make setup` installs (etc/jupyter): a notebook committed as if run under another Python
  version, and the control, are saved by autosave (the server's log says so) and stay clean too.

What JupyterLab writes is known once the kernel has answered its info request and its spec is loaded (the kernel's
names then are in the notebook's model); a notebook that must change is waited for, up to a generous deadline, and
one that must not is left open a fixed READ_S past that point, several autosaves.
"""

import contextlib
import json
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from jlab import (
    ROOT,
    LabServer,
    notebook_expectations,
    notebooks_dir,
    open_notebook,
    skip_unless_browser_tests,
)

skip_unless_browser_tests()

AUTOSAVE_S = 2
READ_S = 4 * AUTOSAVE_S + 3  # how long a notebook that must stay clean stays open once its kernel's names are known
EVENT_S = 90  # how long a save that must come (the control's rewrite, the server's log of a save) is waited for
OPENED = [
    "notebooks/14_flash_attention_triton.ipynb",
    "notebooks/zh-CN/15_ring_attention.ipynb",
    "exercises/14_flash_triton.ipynb",
    "solutions/zh-CN/07_interview_mha.ipynb",
]
OTHER_PYTHON = "notebooks/01_self_attention.ipynb"  # committed with language_info.version 3.99.0 in the copy
CONTROL = "notebooks/control-old-display-name.ipynb"  # a copy of notebook 02 with display name "Python 3"


def _git(root: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(
        ["git", *args], cwd=root, env={**env, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True
    )
    return done.stdout


def _edit_metadata(path: Path, key: str, field: str, value: str) -> None:
    """Change one metadata field in place, keeping the byte layout of everything else."""
    text = path.read_text(encoding="utf-8")
    needle = f'"{field}": "{json.loads(text)["metadata"][key][field]}"'
    assert text.count(needle) == 1, (path, needle)
    path.write_text(text.replace(needle, f'"{field}": "{value}"'), encoding="utf-8")


@contextlib.contextmanager
def _serve(server_config):
    """A JupyterLab with autosave every AUTOSAVE_S seconds over a committed git checkout of the repository's copy,
    which holds the OTHER_PYTHON and CONTROL notebooks as well."""
    if notebooks_dir() != (ROOT / "notebooks").resolve():
        pytest.skip("reads the course's own notebooks")
    settings = {"@jupyterlab/docmanager-extension/plugin": {"autosave": True, "autosaveInterval": AUTOSAVE_S}}
    with tempfile.TemporaryDirectory(prefix="attn-lab-git-") as workdir:
        server = LabServer(Path(workdir), ROOT, notebooks_dir(), settings=settings, server_config=server_config)
        _edit_metadata(server.root / OTHER_PYTHON, "language_info", "version", "3.99.0")
        control = server.root / CONTROL
        control.write_bytes((server.root / "notebooks" / "02_causal_attention.ipynb").read_bytes())
        _edit_metadata(control, "kernelspec", "display_name", "Python 3")
        for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "the course as cloned")):
            _git(server.root, *args)
        with server.running():
            yield server


# the kernel's info reply and spec: what JupyterLab writes into the notebook (language_info, kernelspec) is known
_KERNEL_NAMES_KNOWN_JS = """async () => {
  const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
  await kernel.info;
  await kernel.spec;
}"""


def _read(browser, server, rel, until=None):
    """Open ``rel`` as a learner would and wait until its kernel is idle and its names are known; then wait until
    ``until(server)`` holds (polled, up to EVENT_S), or without ``until`` leave it open READ_S, past a few autosaves.
    Returns `git status`. ``browser`` is the session's Chromium (tests/browser/conftest.py); the server is this
    test's own."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    try:
        page = context.new_page()
        open_notebook(page, server, rel, notebook_expectations(server.root / rel)["num_cells"])
        page.evaluate(_KERNEL_NAMES_KNOWN_JS)
        if until is None:
            time.sleep(READ_S)
        else:
            deadline = time.monotonic() + EVENT_S
            while not until(server) and time.monotonic() < deadline:
                time.sleep(0.25)
    finally:
        context.close()
        server.shutdown_kernels()
    return _git(server.root, "status", "--porcelain")


def _changed(server) -> bool:
    return _git(server.root, "status", "--porcelain") != ""


def _saved(rel):
    """Whether the server has logged a save of ``rel`` and finished it (the post-save hook runs within the save:
    one more autosave interval covers its write)."""

    def saved(server) -> bool:
        if f"Saving file at /{rel}" not in server.log_tail(400):
            return False
        time.sleep(AUTOSAVE_S)
        return True

    return saved


def test_the_committed_notebooks_alone_stay_clean_and_the_old_name_does_not(browser):
    with _serve(server_config=("jupyter_server_config.json",)) as server:
        status = _read(browser, server, CONTROL, until=_changed)  # first: this server's autosave does rewrite
        assert status.strip() == f"M {CONTROL}", f"autosave did not rewrite the control within {EVENT_S} s:\n{status}"
        for rel in OPENED:
            status = _read(browser, server, rel).replace(f" M {CONTROL}\n", "")
            assert status == "", f"opening {rel} in JupyterLab changed the checkout:\n{status}"


def test_with_the_course_server_config_another_python_stays_clean_too(browser):
    with _serve(server_config=LabServer.SERVER_CONFIG) as server:
        for rel in [CONTROL, OTHER_PYTHON]:  # their kernel names differ from the kernel's: autosave saves them
            status = _read(browser, server, rel, until=_saved(rel))
            assert f"Saving file at /{rel}" in server.log_tail(400), f"autosave never saved {rel} within {EVENT_S} s"
            assert status == "", f"opening {rel} in JupyterLab changed the checkout:\n{status}"
        status = _read(browser, server, OPENED[1])
        assert status == "", f"opening {OPENED[1]} in JupyterLab changed the checkout:\n{status}"

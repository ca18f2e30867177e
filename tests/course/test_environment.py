"""The pins in requirements.txt and requirements-test.txt (the sources of truth: the course, the test tools),
environment.yml (both, for conda) and requirements-nbgrader.txt must agree."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# name==version, then an optional environment marker: triton==3.7.1; sys_platform == "linux"
PIN = re.compile(r"^\s*(?:-\s*)?([A-Za-z0-9_.\-]+)==([^\s#;]+)\s*(?:;\s*([^#]*?))?\s*(?:#.*)?$")


def pins(path, markers=False):
    """{name: version} (or {name: (version, marker)}) of every pinned line in ``path``."""
    found = {}
    for line in path.read_text().splitlines():
        m = PIN.match(line)
        if m:
            found[m.group(1).lower()] = (m.group(2), m.group(3) or "") if markers else m.group(2)
    return found


def test_environment_yml_matches_requirements():
    course, tools = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-test.txt")
    assert course and tools, "requirements.txt or requirements-test.txt has no pins"
    assert not set(course) & set(tools), f"pinned in both requirement files: {set(course) & set(tools)}"
    req, env = course | tools, pins(ROOT / "environment.yml")
    assert req == env, f"the requirement files and environment.yml disagree: {set(req.items()) ^ set(env.items())}"


def test_the_course_needs_no_test_tools():
    # make lab installs only requirements.txt: the test tools (playwright alone is about 160 MiB) stay out of it
    course = pins(ROOT / "requirements.txt")
    assert {"torch", "jupyterlab", "ipywidgets", "matplotlib"} <= set(course)
    assert not {"pytest", "nbval", "playwright", "pytest-xdist"} & set(course), course


def test_nbgrader_requirements_share_the_course_pins():
    # the instructors' environment (.venv-nbgrader) runs the same Jupyter stack as the course's
    req, nbg = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-nbgrader.txt")
    assert nbg.get("nbgrader", "").startswith("0.9."), "nbgrader 0.9.x is the release for JupyterLab 4"
    shared = set(req) & set(nbg)
    assert {"jupyterlab", "nbconvert", "nbclient", "nbformat", "ipykernel"} <= shared
    assert {k: req[k] for k in shared} == {k: nbg[k] for k in shared}


def test_every_phony_make_target_has_a_rule():
    makefile = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()
    rules = set(re.findall(r"^([A-Za-z][\w-]*):", makefile, re.M))
    assert set(phony) - rules == set(), "declared .PHONY without a rule"


def test_installed_torch_is_the_pinned_one():
    import torch

    assert torch.__version__.split("+")[0] == pins(ROOT / "requirements.txt")["torch"]


def test_make_setup_finds_the_torch_pin():
    # make setup installs torch first, from the index TORCH_INDEX picks, with `grep -E '^torch==' requirements.txt`
    lines = [line for line in (ROOT / "requirements.txt").read_text().splitlines() if re.match(r"torch==", line)]
    assert lines == [f"torch=={pins(ROOT / 'requirements.txt')['torch']}"], lines


def test_markers_agree_and_triton_is_linux_only():
    # triton has wheels for Linux only: pip skips it elsewhere, and notebook 14's tests skip with the reason
    req, env = pins(ROOT / "requirements.txt", markers=True), pins(ROOT / "environment.yml", markers=True)
    assert {k: v for k, v in req.items() if v[1]} == {k: v for k, v in env.items() if v[1]}
    assert req["triton"][1] == 'sys_platform == "linux"', req["triton"]

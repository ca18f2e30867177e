"""The pins in requirements.txt (the source of truth), environment.yml and requirements-nbgrader.txt must agree."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^\s*(?:-\s*)?([A-Za-z0-9_.\-]+)==([^\s#]+)")


def pins(path):
    found = {}
    for line in path.read_text().splitlines():
        m = PIN.match(line)
        if m:
            found[m.group(1).lower()] = m.group(2)
    return found


def test_environment_yml_matches_requirements():
    req, env = pins(ROOT / "requirements.txt"), pins(ROOT / "environment.yml")
    assert req, "requirements.txt has no pins"
    assert req == env, f"requirements.txt and environment.yml disagree: {set(req.items()) ^ set(env.items())}"


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

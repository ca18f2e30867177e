"""The Binder / repo2docker configuration in binder/: the course with PyTorch's CPU build, the pins of
requirements.txt, the course's Jupyter settings, checked by repo2docker's own build plan (no container engine)."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"


def _pins(path: Path) -> dict:
    return dict(re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", path.read_text(), re.M))


def _requirements(path: Path) -> list:
    """The names a requirements file installs (not its options, constraints or comments), normalised."""
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            names.append(re.split(r"[=<>;\[ ]", line)[0].lower().replace("_", "-"))
    return names


def test_binder_installs_the_cpu_build_of_the_pinned_torch_and_the_course_pins():
    lines = BINDER.joinpath("requirements.txt").read_text().splitlines()
    course = _pins(ROOT / "requirements.txt")
    cpu_index = re.search(r"^TORCH_CPU_INDEX := (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert f"--extra-index-url {cpu_index}" in lines  # the index make setup uses on a machine without a GPU
    assert f"torch=={course['torch']}+cpu" in lines  # the CUDA build would make the image several GB
    # every version from the one source of truth, as constraints relative to this file
    assert "-c ../requirements.txt" in lines and "-c ../requirements-nbgrader.txt" in lines
    assert (BINDER / "../requirements.txt").resolve() == ROOT / "requirements.txt"
    assert BINDER.joinpath("runtime.txt").read_text().strip() == "python-3.11"
    installed = set(_requirements(BINDER / "requirements.txt"))
    wanted = {name.lower().replace("_", "-") for name in course} - {"triton"}
    assert wanted <= installed, f"binder/ leaves out {wanted - installed}"
    assert "triton" not in installed  # 0.7 GB for notebook 14 alone: not in the Binder image unless asked for
    pinned = {n.lower().replace("_", "-") for n in course} | {
        n.lower().replace("_", "-") for n in _pins(ROOT / "requirements-nbgrader.txt")
    }
    assert installed - {"torch"} <= pinned, f"binder/ installs unpinned {installed - pinned}"


def _base_environment() -> dict:
    """name -> version of the Jupyter packages in repo2docker's base environment for Python 3.11 (its lock file)."""
    package = Path(importlib.util.find_spec("repo2docker").origin).parent  # found, not imported: its import warns
    lock = package / "buildpacks" / "conda" / "environment.py-3.11-linux-64.lock"
    found = re.findall(r"/([A-Za-z0-9_.-]+?)-(\d[^-/]*)-[^-/]+\.(?:conda|tar\.bz2)", lock.read_text())
    return {name.lower().replace("_", "-"): version for name, version in found}


def test_binder_brings_the_jupyter_packages_that_go_with_its_jupyterlab():
    # repo2docker's base environment has its own Notebook (7.4 at the time of writing), which refuses a newer
    # JupyterLab: pip's resolver then logs an ERROR and leaves the image with a broken dependency. Every front-end
    # package of the base that JupyterLab's version constrains is installed from our pins, which resolve together
    # (requirements-nbgrader.txt: JupyterLab, Notebook and their servers, pip check clean in make nbgrader-setup).
    if importlib.util.find_spec("repo2docker") is None:
        pytest.skip("repo2docker is not installed (pip install -r requirements-test.txt)")
    base = _base_environment()
    installed = set(_requirements(BINDER / "requirements.txt"))
    front_end = {
        "notebook",
        "notebook-shim",
        "jupyterlab",
        "jupyter-server",
        "jupyterlab-server",
        "ipywidgets",
        "jupyterlab-widgets",
        "widgetsnbextension",
    }
    in_base = front_end & set(base)
    assert in_base, "repo2docker's base environment changed: read its lock file again"
    assert in_base <= installed, f"binder/ leaves the base environment's {in_base - installed} as they are"


def _installed_size(names: set) -> int:
    """Bytes that ``names`` and everything they require take installed, measured on this environment's copies (the
    same pins; torch is the CPU build where make setup chose it)."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement

    dists = {d.metadata["Name"].lower().replace("_", "-"): d for d in metadata.distributions()}
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in dists:
            continue
        seen.add(name)
        for spec in dists[name].requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name.lower().replace("_", "-"))
    total = 0
    for name in seen:
        for f in dists[name].files or []:
            try:
                total += f.locate().stat().st_size
            except OSError:
                pass
    return total


BINDER_SIZE_GB = 1.3  # what the READMEs state: the course's packages, on top of repo2docker's base image


def test_the_image_size_the_readmes_state_is_what_binder_installs():
    import torch

    if "+cpu" not in torch.__version__:
        pytest.skip(f"this environment's torch is {torch.__version__}, not the CPU build Binder installs")
    installed = set(_requirements(BINDER / "requirements.txt"))
    size = _installed_size(installed) / 1e9
    assert size <= BINDER_SIZE_GB, f"binder/ installs {size:.2f} GB, the READMEs say about {BINDER_SIZE_GB} GB"
    assert size >= BINDER_SIZE_GB * 0.7, f"binder/ installs {size:.2f} GB: say so in the READMEs"
    for readme, said in (
        ("README.md", f"about {BINDER_SIZE_GB:g} GB"),
        ("README.zh-CN.md", f"约 {BINDER_SIZE_GB:g} GB"),
    ):
        assert said in (ROOT / readme).read_text(encoding="utf-8"), readme


def test_post_build_installs_the_course_and_its_settings():
    post = BINDER / "postBuild"
    assert os.access(post, os.X_OK)
    script = post.read_text()
    assert "pip install --no-deps --no-cache-dir -e ." in script
    for copied in re.findall(r"\betc/[\w/.]+", script):
        assert (ROOT / copied).exists(), f"postBuild copies {copied}, which does not exist"
    assert {"etc/ipython", "etc/jupyter", "etc/lab/overrides.json"} <= set(re.findall(r"\betc/[\w/.]+", script))


def test_repo2docker_build_plan_uses_the_binder_folder():
    if shutil.which("git") is None:
        pytest.skip("repo2docker reads the repository with git, which is not installed")
    if importlib.util.find_spec("repo2docker") is None:  # found, not imported: its import warns in this process
        pytest.skip("repo2docker is not installed (pip install -r requirements-test.txt)")
    proc = subprocess.run(
        [sys.executable, "-m", "repo2docker", "--no-build", "--no-run", "--debug", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    plan = proc.stdout + proc.stderr
    assert proc.returncode == 0, plan[-2000:]
    assert "Building conda environment for python=3.11" in plan
    assert 'pip install --no-cache-dir -r "binder/requirements.txt"' in plan
    assert "RUN ./binder/postBuild" in plan
    assert plan.index("COPY --chown=0:0 src/ ${REPO_DIR}/") < plan.index('-r "binder/requirements.txt"'), (
        "pip runs before the repository is copied: -r ../requirements.txt would not be found"
    )
    assert "requirements.txt" not in re.sub(r"binder/requirements\.txt", "", plan.split("Copy stuff.")[0]), (
        "repo2docker picked the top-level requirements.txt (CUDA torch) instead of binder/"
    )


def test_the_readmes_say_how_to_launch_on_binder_and_show_no_badge():
    for readme in ("README.md", "README.zh-CN.md"):
        text = (ROOT / readme).read_text(encoding="utf-8")
        assert "binder/" in text and "urlpath=lab/tree/notebooks/README.md" in text, readme
        # no badge until the repository has a public address: a badge would launch a repository that is not there
        assert "mybinder.org/badge" not in text and "badge_logo.svg" not in text, readme

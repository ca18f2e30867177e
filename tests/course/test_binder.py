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


def test_binder_installs_the_cpu_build_of_the_pinned_torch_and_the_course_pins():
    lines = BINDER.joinpath("requirements.txt").read_text().splitlines()
    course = _pins(ROOT / "requirements.txt")
    cpu_index = re.search(r"^TORCH_CPU_INDEX := (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert f"--extra-index-url {cpu_index}" in lines  # the index make setup uses on a machine without a GPU
    assert f"torch=={course['torch']}+cpu" in lines  # the CUDA build would make the image several GB
    assert "-r ../requirements.txt" in lines  # relative to this file: every other pin from the one source of truth
    assert (BINDER / "../requirements.txt").resolve() == ROOT / "requirements.txt"
    assert BINDER.joinpath("runtime.txt").read_text().strip() == "python-3.11"


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


def test_the_readmes_say_how_to_launch_on_binder():
    for readme in ("README.md", "README.zh-CN.md"):
        text = (ROOT / readme).read_text(encoding="utf-8")
        assert "binder/" in text and "urlpath=lab/tree/notebooks/README.md" in text, readme

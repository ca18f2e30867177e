"""The pins in requirements.txt (the source of truth) and environment.yml must agree."""
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


def test_installed_torch_is_the_pinned_one():
    import torch
    assert torch.__version__.split("+")[0] == pins(ROOT / "requirements.txt")["torch"]

"""The hub `make test-hub` installs (HUB_DIR): its Python, and the skip of a module that needs it where it is not there
(an error in CI, which asked for it with RUN_HUB_TESTS=1)."""

import os
from pathlib import Path

import pytest

PREFIX = Path(os.environ.get("HUB_DIR", "/nonexistent"))
PYTHON = PREFIX / "env" / "bin" / "python"


def need_installed_hub(tests: str, *files: Path) -> None:
    """Skip the calling module (``tests``: what it tests, for the reason) unless the hub and ``files`` are installed."""
    if os.environ.get("RUN_HUB_TESTS", "") not in ("", "0") and PYTHON.exists() and all(f.exists() for f in files):
        return
    if os.environ.get("RUN_HUB_TESTS") and os.environ.get("CI", "").lower() in ("1", "true"):
        raise RuntimeError(f"CI asked for {tests}, but no hub is installed in HUB_DIR={PREFIX}")
    pytest.skip(f"{tests} run in `make test-hub` (they need the installed hub)", allow_module_level=True)

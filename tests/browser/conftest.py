"""Fixtures for the browser test: one JupyterLab server and one headless Chromium for the whole run.

The test runs only with RUN_BROWSER_TESTS=1 (`make test-browser`) and a Chromium on PATH; otherwise it is
skipped with a message saying how to enable it, so `make test` stays green on a learner's machine. In CI
(CI=true) a missing Chromium is an error: there the browser test must really run.
"""

import tempfile
from pathlib import Path

import pytest
from jlab import (
    CHROMIUM_ARGS,
    ROOT,
    SKIP_REASON,
    LabServer,
    browser_tests_wanted,
    chromium_env,
    chromium_path,
    notebooks_dir,
)

SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"


@pytest.fixture(scope="session")
def lab_server():
    if not browser_tests_wanted() or chromium_path() is None:
        pytest.skip(SKIP_REASON)
    with (
        tempfile.TemporaryDirectory(prefix="attn-lab-") as workdir,
        LabServer(Path(workdir), ROOT, notebooks_dir()).running() as server,
    ):
        yield server


@pytest.fixture(scope="session")
def browser(lab_server):
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(),
            headless=True,
            args=CHROMIUM_ARGS,
            env=chromium_env(lab_server.workdir / "chromium"),
        )
        try:
            yield browser
        finally:
            browser.close()
    finally:
        playwright.stop()


@pytest.fixture
def page(browser, lab_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    console_errors = []
    page.on("pageerror", lambda exc: console_errors.append(str(exc)))
    page.console_errors = console_errors
    try:
        yield page
    finally:
        try:
            context.close()
        finally:
            lab_server.shutdown_kernels()  # frees the CPU and memory for the next notebook


@pytest.fixture(scope="session")
def screenshots():
    SCREENSHOTS.mkdir(exist_ok=True)
    return SCREENSHOTS

"""tests/gateway/ui: the web chat page in headless Chromium (helpers in browser.py)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: make browser importable

import browser  # noqa: E402


@pytest.fixture(scope="session")
def driver():
    browser.require()
    chrome = browser.start_chrome()
    yield chrome
    chrome.quit()


@pytest.fixture(scope="session")
def artefacts(tmp_path_factory) -> Path:
    return browser.artefacts_dir(tmp_path_factory)


@pytest.fixture
def page(driver, server):
    """The session SmolLM2 server's page, in a 1200x900 window."""
    driver.set_window_size(1200, 900)
    return browser.ChatPage(driver, server.base_url)

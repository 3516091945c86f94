"""Headless Chromium under Selenium for tests/gateway/ui and benchmarks/ui_bench.py: the
distribution's `chromium` and `chromedriver` (apt-get install chromium chromium-driver), never a
downloaded one (Selenium Manager is kept offline), with the browser console and the network log
recorded. Missing on a developer machine → the tests skip with that hint; in CI (`.ci/run` installs
them and sets LANESERVE_TEST_REQUIRE_BROWSER=1) a missing one fails the run."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

INSTALL_HINT = "apt-get install chromium chromium-driver; pip install selenium"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WAIT_S = 30.0


def missing() -> str | None:
    """Why no browser can be driven here, else None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed"
    if not any(shutil.which(name) for name in BROWSERS):
        return "chromium is not installed"
    if not shutil.which("chromedriver"):
        return "chromedriver is not installed"
    return None


def require() -> None:
    """Skip (a developer machine) or fail (CI) when no browser can be driven."""
    reason = missing()
    if reason is None:
        return
    message = f"{reason} ({INSTALL_HINT})"
    if os.environ.get("LANESERVE_TEST_REQUIRE_BROWSER"):
        pytest.fail(message + "; CI requires it", pytrace=False)
    pytest.skip(message)


def start_chrome(width: int = 1200, height: int = 900):
    """A headless Chromium WebDriver whose console (`browser`) and DevTools network events
    (`performance`) can be read with get_log."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager: never fetch a driver
    options = webdriver.ChromeOptions()
    options.binary_location = next(shutil.which(name) for name in BROWSERS if shutil.which(name))
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))


def console_errors(driver) -> list[str]:
    """Console messages of level SEVERE since the last call (errors, failed loads)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def requested_urls(driver) -> list[str]:
    """URLs the page requested since the last call (DevTools Network.requestWillBeSent)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def wait_for(condition, timeout_s: float = WAIT_S, poll_s: float = 0.05, what: str = "condition"):
    """Polls `condition()` until it returns something truthy (returned), or fails after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


def artefacts_dir(tmp_path_factory) -> Path:
    """Where screenshots go: $LANESERVE_ARTEFACTS/ui when set, else a pytest temporary folder."""
    root = os.environ.get("LANESERVE_ARTEFACTS")
    if not root:
        return tmp_path_factory.mktemp("ui-screenshots")
    folder = Path(root) / "ui"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class ChatPage:
    """The /ui page of a server, driven through its controls as a user would."""

    def __init__(self, driver, base_url: str) -> None:
        self.driver, self.base_url = driver, base_url

    def find(self, css: str):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list:
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def open(self, storage: dict | None = None, wait_models: bool = True) -> "ChatPage":
        """Loads /ui with a clean localStorage (plus `storage`: key → JSON value), the console
        and network logs emptied first, so they hold this load only; waits for the model list."""
        self.driver.get(self.base_url + "/ui")
        self.driver.execute_script(
            "localStorage.clear(); for (const [k, v] of Object.entries(arguments[0])) localStorage.setItem(k, JSON.stringify(v));",
            storage or {})
        console_errors(self.driver), requested_urls(self.driver)
        self.driver.refresh()
        if wait_models:
            wait_for(self.model_names, what="the model list")
        return self

    def model_names(self) -> list[str]:
        return [o.get_attribute("value") for o in self.find_all("#model option")]

    def choose_model(self, name: str) -> None:
        from selenium.webdriver.support.ui import Select

        Select(self.find("#model")).select_by_value(name)

    def settings(self, **values: str) -> None:
        """Fills the settings form (system, temperature, max_tokens), opening it when closed."""
        if not self.find("#settings").is_displayed():
            self.find("#toggle-settings").click()
        for name, value in values.items():
            field = self.find("#" + name.replace("_", "-"))
            field.clear()
            field.send_keys(value)
        self.find("#toggle-settings").click()  # closing the form commits the last field (change event)

    def send(self, text: str) -> None:
        self.find("#prompt").send_keys(text)
        self.find("#send").click()
        wait_for(self.answers, what="the answer's element")

    def answers(self) -> list:
        return self.find_all(".message.assistant")

    def last_answer(self):
        return self.answers()[-1]

    def streaming(self) -> bool:
        return "streaming" in self.last_answer().get_attribute("class")

    def answer_text(self) -> str:
        return self.last_answer().find_element("css selector", ".answer").get_attribute("textContent")

    def wait_done(self, timeout_s: float = 60.0) -> None:
        wait_for(lambda: not self.streaming(), timeout_s, what="the answer to end")

    def request_id(self) -> str:
        return self.last_answer().get_attribute("data-request-id")

    def screenshot(self, folder: Path, name: str) -> Path:
        path = folder / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

"""Headless Chromium through selenium (Debian's ``chromium`` + ``chromium-driver``), and
waits for a Dash page to finish drawing. Used by the browser tests, the README screenshot
script and the dashboard benchmark.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")


def _first(paths: tuple[str, ...], name: str) -> str:
    found = next((p for p in paths if os.path.exists(p)), None) or shutil.which(name)
    if not found:
        raise RuntimeError(
            f"{name} not found (looked in {', '.join(paths)}); install Debian's packages: "
            "apt-get install -y chromium chromium-driver (.ci/run does)"
        )
    return found


def chromium(width: int = 1400, height: int = 1000) -> webdriver.Chrome:
    """A headless Chromium whose console log can be read (``console``)."""
    options = webdriver.ChromeOptions()
    options.binary_location = _first(CHROMIUM, "chromium")
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--enable-unsafe-swiftshader",
        f"--window-size={width},{height}",
        "--hide-scrollbars",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=_first(DRIVER, "chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    return driver


def console(driver: webdriver.Chrome, level: str = "WARNING") -> list[dict[str, Any]]:
    """Console entries at ``level`` or worse since the last call (the log is drained)."""
    order = ["DEBUG", "INFO", "WARNING", "SEVERE"]
    entries = driver.get_log("browser")
    return [e for e in entries if order.index(e["level"]) >= order.index(level)]


def wait(
    driver: webdriver.Chrome, condition: Callable[[], Any], what: str, limit: float = 60
) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``limit`` s."""
    deadline = time.monotonic() + limit
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {limit} s")
        time.sleep(0.05)


PAGE_DRAWN = """
const busy = document.querySelector('[data-dash-is-loading="true"]');
const graphs = [...document.querySelectorAll('.js-plotly-plot')];
return !busy && graphs.length >= arguments[0] && graphs.every(g => g._fullLayout);
"""


def drawn(driver: webdriver.Chrome, graphs: int, limit: float = 60) -> None:
    """Wait until no Dash callback is running and ``graphs`` Plotly graphs are drawn."""
    wait(driver, lambda: driver.execute_script(PAGE_DRAWN, graphs), f"{graphs} graphs", limit)


def text(driver: webdriver.Chrome, element_id: str) -> str:
    """The visible text of the element with ``element_id`` ("" while Dash replaces it)."""
    try:
        return str(driver.find_element(By.ID, element_id).text)
    except (StaleElementReferenceException, NoSuchElementException):
        return ""

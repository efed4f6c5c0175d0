"""What a user sees first: for each demo run, the top 1400×900 of its page says what went
wrong, where and when, and links to the evidence; the Alerts page lists the demo's drift
and NaN alerts (the demo's log-only rule)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from gradwatch_dashboard.api_client import Api
from tests.dashboard.browser import chromium, drawn, text, wait
from tests.dashboard.conftest import DEMO_STEPS
from tests.dashboard.served_demo import watched_demo

pytestmark = pytest.mark.slow
SCREEN = (1400, 900)


@pytest.fixture(scope="module")
def watched_url(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from watched_demo(demo_dir, tmp_path_factory.mktemp("watched") / "data")


@pytest.fixture(scope="module")
def screen() -> Iterator[webdriver.Chrome]:
    """A browser window of a laptop's first screen (its inner height is 900 px)."""
    driver = chromium(*SCREEN)
    driver.set_window_size(SCREEN[0], SCREEN[1] + 100)  # + the window's own frame
    yield driver
    driver.quit()


def first_screen(driver: webdriver.Chrome, url: str) -> str:
    """The text of the run page's summary, which must lie wholly in the first screen."""
    driver.get(url)
    wait(driver, lambda: text(driver, "run-explain"), "the run summary")
    drawn(driver, 5)
    card = driver.find_element(By.ID, "run-evidence")
    inner = driver.execute_script("return window.innerHeight")
    bottom = driver.execute_script("return arguments[0].getBoundingClientRect().bottom", card)
    assert inner <= SCREEN[1] and bottom <= inner, (bottom, inner)
    return text(driver, "run-title") + "\n" + text(driver, "run-explain")


def evidence(driver: webdriver.Chrome) -> dict[str, str]:
    links = driver.find_element(By.ID, "run-evidence").find_elements(By.TAG_NAME, "a")
    return {a.text: str(a.get_attribute("href")) for a in links}


@pytest.mark.parametrize("name", ["replicate-a", "replicate-b"])
def test_a_correct_run_says_nothing_is_wrong(
    screen: webdriver.Chrome, watched_url: str, name: str
) -> None:
    ids = {r["name"]: r["id"] for r in Api(watched_url).get("/runs")["data"]}
    seen = first_screen(screen, f"{watched_url}/runs/{ids[name]}")
    assert "No problems found" in seen and "finished" in seen and "ok" in seen
    assert evidence(screen) == {}


def test_the_stale_gradient_run_names_the_bug_its_step_and_the_fix(
    screen: webdriver.Chrome, watched_url: str
) -> None:
    ids = {r["name"]: r["id"] for r in Api(watched_url).get("/runs")["data"]}
    seen = first_screen(screen, f"{watched_url}/runs/{ids['stale-grad']}")
    assert "finished with errors" in seen
    assert "stale-grad at step 2: " in seen and "gradients are not being cleared" in seen
    links = evidence(screen)
    assert links["see step 2 in every chart"].endswith(f"/runs/{ids['stale-grad']}?step=2")


def test_the_nan_run_names_the_first_bad_step_and_tensor(
    screen: webdriver.Chrome, watched_url: str
) -> None:
    ids = {r["name"]: r["id"] for r in Api(watched_url).get("/runs")["data"]}
    seen = first_screen(screen, f"{watched_url}/runs/{ids['nan-onset']}")
    found = re.search(r"First NaN/Inf at step (\d+) in 0\.weight", seen)
    assert found and int(found.group(1)) >= DEMO_STEPS // 2 and "finished with errors" in seen
    steps = [int(s) for s in re.findall(r"^Step (\d+):", seen, flags=re.M)]
    assert steps == sorted(steps)  # the summary reads in the order things happened
    screen.find_element(By.LINK_TEXT, f"see step {found.group(1)} in every chart").click()
    wait(screen, lambda: f"step={found.group(1)}" in screen.current_url, "the step link")


def test_the_drifting_run_says_where_it_split_and_links_to_the_comparison(
    screen: webdriver.Chrome, watched_url: str
) -> None:
    ids = {r["name"]: r["id"] for r in Api(watched_url).get("/runs")["data"]}
    seen = first_screen(screen, f"{watched_url}/runs/{ids['drifting']}")
    split = DEMO_STEPS // 3 + 1
    assert "repro-drift (0.weight): this run diverged from its replicate" in seen
    assert f"at step {split} (batch; first differing tensor 0.weight)" in seen
    assert "cause: data-order" in seen and seen.count(f"step {split}") == 1  # said once
    screen.find_element(By.LINK_TEXT, "compare with its replicate").click()
    words = wait(screen, lambda: text(screen, "cmp-words"), "the comparison")
    assert "drifting diverged from" in words and "Cause: data-order." in words


def test_the_alerts_page_lists_the_demo_alerts(screen: webdriver.Chrome, watched_url: str) -> None:
    ids = {r["name"]: r["id"] for r in Api(watched_url).get("/runs")["data"]}
    screen.get(f"{watched_url}/alerts")
    shown = wait(screen, lambda: text(screen, "alerts-table"), "the alerts")
    assert "repro-drift" in shown and "nonfinite-loss" in shown
    assert not any(run_id in shown for run_id in ids.values())  # runs named by their names
    rows = screen.find_elements(By.CSS_SELECTOR, "#alerts-list tbody tr")
    by_run: dict[str, list[str]] = {}
    for row in rows:
        run = row.find_elements(By.TAG_NAME, "td")[2].text
        by_run.setdefault(run, []).append(row.text)
    assert {"drifting", "nan-onset"} <= set(by_run)
    assert not {"replicate-a", "replicate-b"} & set(by_run)  # named only as the reference
    # one row per incident: the NaN onset's findings (loss, gradients, …) are one row
    api = Api(watched_url)
    raised = api.get("/alerts", project="demo")["data"]
    nan = [a for a in raised if a["run"] == ids["nan-onset"]]
    assert len(by_run["nan-onset"]) == len({a["incident"] for a in nan}) < len(nan)
    assert "replicate-a" in by_run["drifting"][0]  # the replicate by its name

"""The structure timeline on the run page and the group's invariants on the compare page,
in headless Chromium against a real server holding real training runs: a run whose
clipping stops at step 30, and a replicate group of three where one replicate's
embedding is frozen."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from gradwatch_dashboard.api_client import Api
from tests.dashboard.browser import console, drawn, text
from tests.dashboard.conftest import serve
from tests.dashboard.test_browser import open_page, page_problems
from tests.server.structure_runs import CLIP_UNTIL, record

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def structure_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A live server holding the four structure runs (trained once for the module)."""
    root = tmp_path_factory.mktemp("structure-data")
    record(root)
    yield from serve(Path(tmp_path_factory.mktemp("structure-db")) / "gw.db", root)


def ids_by_name(url: str) -> dict[str, str]:
    return {r["name"]: r["id"] for r in Api(url).get("/runs")["data"]}


def test_the_run_page_shows_the_clipping_that_stopped_at_its_step(
    browser: webdriver.Chrome, structure_url: str
) -> None:
    run = ids_by_name(structure_url)["clip-dropped"]
    browser.get("about:blank")  # the page an earlier module left open (its server is gone)
    console(browser)  # and what it logged: only this page's problems are judged
    words = open_page(browser, f"{structure_url}/runs/{run}", "run-structure-list")
    drawn(browser, 5)
    item = browser.find_element(
        By.CSS_SELECTOR, f'#run-structure-list li[data-step="{CLIP_UNTIL}"]'
    )
    assert item.text.startswith(f"step {CLIP_UNTIL} warning From step {CLIP_UNTIL}, ")
    assert "clip_grad_norm_ is no longer called before step()" in item.text
    assert words.count("\n") == 0  # one change: nothing else is listed
    # the mark sits at its step on the page's step axis (the loss chart's)
    marks, axis, loss_axis = browser.execute_script(
        "const plot = id => document.getElementById(id).querySelector('.js-plotly-plot');"
        "const g = plot('run-structure-graph'), l = plot('run-loss-graph');"
        "return [g.data.flatMap(t => Array.from(t.x)), g._fullLayout.xaxis.range,"
        " l._fullLayout.xaxis.range];"
    )
    assert marks == [CLIP_UNTIL]
    assert axis == loss_axis
    # the warning is one of the run's findings (stored by the collector): the header says
    # so instead of "No problems found", and the findings list has it, once
    header = text(browser, "run-header")
    assert "finished with warnings" in header and "No problems found" not in header, header
    explained = text(browser, "run-explain")
    assert explained.startswith(f"structure-safeguard: From step {CLIP_UNTIL}, "), explained
    findings = text(browser, "run-findings")
    # one incident (its sentence) and its one finding row
    assert findings.count(f"warning structure-safeguard step {CLIP_UNTIL}") == 1, findings
    assert findings.count("clip_grad_norm_ is no longer called") == 2, findings
    assert page_problems(browser) == []


def test_a_run_with_no_structure_change_says_so(
    browser: webdriver.Chrome, structure_url: str
) -> None:
    run = ids_by_name(structure_url)["twin-a"]
    words = open_page(browser, f"{structure_url}/runs/{run}", "run-structure-panel")
    assert words.startswith("Structure: no change.")


def test_the_compare_page_names_the_broken_invariant_and_the_run_that_breaks_it(
    browser: webdriver.Chrome, structure_url: str
) -> None:
    named = ids_by_name(structure_url)
    runs = ",".join(named[n] for n in ("twin-a", "twin-b", "twin-c"))
    open_page(browser, f"{structure_url}/compare?runs={runs}", "cmp-breaks")
    held = browser.find_element(By.ID, "cmp-invariants").text
    assert "3 tensors (0.weight, 2.weight, 2.bias) each received a gradient on every step" in held
    rows = {
        row.find_elements(By.TAG_NAME, "td")[0].text.split(" ")[0]: row.text
        for row in browser.find_elements(By.CSS_SELECTOR, "#cmp-breaks tbody tr")
    }
    assert set(rows) == {"twin-a", "twin-b", "twin-c"}
    assert "taught the invariants" in rows["twin-a"] and rows["twin-a"].endswith("none")
    assert (
        "grads-always from step 1: 0.weight received a gradient on every step in runs "
        in (rows["twin-c"])
    )
    assert "twin-a, twin-b; in this run it has none from step 1." in rows["twin-c"]
    assert page_problems(browser) == []

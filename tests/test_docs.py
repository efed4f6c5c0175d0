"""The README stays a front page (at most ~250 lines) and every page it and docs/ link to
is in the repository; no reference points outside it or to an issue tracker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_short_and_has_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "make demo" in text and "make test" in text and "gradwatch run" in text


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_local_link_resolves_inside_the_repository(page: Path) -> None:
    text = page.read_text()
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        resolved = (page.parent / target).resolve()
        assert resolved.is_relative_to(ROOT), f"{page.name} links outside: {target}"
        assert resolved.exists(), f"{page.name} links to a missing {target}"
    assert not re.search(r"\bissue \d+|\.\./shared|/work/", text), page.name

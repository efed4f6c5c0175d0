"""Write docs/checks.md from the check registry (gradwatch.core.checks):
``python scripts/gen_checks_doc.py`` (``--check`` exits 1 when the committed page differs
instead of writing it)."""

from __future__ import annotations

import sys
from pathlib import Path

from gradwatch.checks.catalogue_doc import render

PAGE = Path(__file__).resolve().parent.parent / "docs" / "checks.md"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = PAGE.read_text(encoding="utf-8") if PAGE.is_file() else ""
        if current != text:
            print(f"{PAGE} is out of date: run python scripts/gen_checks_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Every check family's declarations (one torch-free module per family) and the registry built
from them, in the order of ``docs/checks.md``.

A new check is one entry in its family's module (its id constant, listed in ``__all__``, and
its :class:`~gradwatch.core.registry.Check`), its test, and the regenerated page
(``python scripts/gen_checks_doc.py``); a new family is one module here and one line in
:data:`FAMILIES`. The code that runs the checks lives in :mod:`gradwatch.checks` (torch);
these modules are what the server and the dashboard read too.
"""

from __future__ import annotations

from typing import Final

from gradwatch.core.checks import coverage, data, ddp, lifecycle, lr, numerics, repro, structure
from gradwatch.core.registry import Family, Registry

#: the families, in the order of the documentation
FAMILIES: Final[tuple[Family, ...]] = (
    lifecycle.FAMILY,
    coverage.FAMILY,
    numerics.FAMILY,
    lr.FAMILY,
    data.FAMILY,
    repro.FAMILY,
    ddp.FAMILY,
    structure.FAMILY,
)

#: every check of every family: what the catalogue, the incident model, lint confirmation
#: and the page's generator read
REGISTRY: Final = Registry(FAMILIES)

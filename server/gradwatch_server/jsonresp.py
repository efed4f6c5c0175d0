"""The JSON response class used for every route: non-finite floats are strings.

Standard JSON has no NaN or infinity (Starlette's JSONResponse refuses them with a 500), so
gradwatch writes ``NaN``, ``Infinity`` and ``-Infinity`` as the *strings* ``"NaN"``,
``"Infinity"`` and ``"-Infinity"`` wherever a float is expected (series values, finding
details, fingerprints). ``-0.0`` and subnormals are written exactly (shortest repr);
non-ASCII text is escaped, so any stored string can be sent.
Both forms are defined once, in :mod:`gradwatch.core.nonfinite`: clients decode float
fields with its ``decode_float``. Free-form objects, where a string may stand (finding and
alert ``details``, a run's ``start``, ``end`` and ``fingerprint``), carry non-finite floats
in the wire's tagged form instead (``{"$f": "nan"}``, its ``to_jsonable``), so NaN and the
string ``"NaN"`` differ there; ``gradwatch.core.client.Api`` decodes them.

Example::

    >>> encode_floats({"values": [1.0, float("nan"), float("-inf")]})
    {'values': [1.0, 'NaN', '-Infinity']}
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.responses import JSONResponse

from gradwatch.core.nonfinite import encode_floats

__all__ = [
    "GWJSONResponse",
    "database_busy",
    "dumps",
]


def dumps(content: Any) -> bytes:
    """The response body for ``content`` (the C encoder first; the float walk only if needed)."""
    try:
        text = json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    except ValueError:  # a non-finite float somewhere
        text = json.dumps(
            encode_floats(content), ensure_ascii=True, allow_nan=False, separators=(",", ":")
        )
    return text.encode("ascii")


class GWJSONResponse(JSONResponse):
    """``JSONResponse`` with the non-finite encoding above."""

    def render(self, content: Any) -> bytes:
        """Serialise ``content``."""
        return dumps(content)


def database_busy(exc: Exception) -> GWJSONResponse:
    """503 for a transient database failure (lock timeout, deadlock, lost connection)."""
    logging.getLogger("gradwatch_server").warning(
        "database error, answered 503: %s", str(exc).splitlines()[0][:300]
    )
    return GWJSONResponse(
        {"detail": "the database is busy or unreachable; retry shortly (nothing was stored)"},
        status_code=503,
        headers={"Retry-After": "1"},
    )

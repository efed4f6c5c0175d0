"""JSON text as the server stores it and as its API sends free-form data.

``dump_json`` writes a value to store (exact non-finite floats, the wire's ``$f`` form),
``load_json`` reads stored text back, ``tagged`` is the API's form of free-form data. Shared
by ingest, the read side, drift and alerts, so none of them imports another for it.
"""

from __future__ import annotations

import json
from typing import Any

from gradwatch.core.nonfinite import loads_tagged, to_jsonable


def dump_json(value: Any) -> str:
    """JSON text with exact non-finite floats (the wire's ``$f`` encoding), ASCII only.

    Values parsed from JSON (string keys) are dumped as they are when that needs no
    tagging: no non-finite float (``allow_nan=False`` raises) and no one-key ``$f``/``$d``
    object (found in the text); anything else takes ``to_jsonable``'s walk.
    """
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError):
        text = None
    if text is None or '{"$f":' in text or '{"$d":' in text:
        text = json.dumps(to_jsonable(value), allow_nan=False, separators=(",", ":"))
    return text


def load_json(text: str | None) -> Any:
    """Stored JSON text back to Python (non-finite floats restored)."""
    return None if text is None else loads_tagged(text)


def tagged(value: Any) -> Any:
    """Free-form data (details, start and end records, fingerprints) as the API sends it:
    non-finite floats in the wire's tagged form ``{"$f": "nan"}``, so that NaN and the
    string ``"NaN"`` stay distinct (decode with ``gradwatch.core.nonfinite.from_jsonable``)."""
    return to_jsonable(value)

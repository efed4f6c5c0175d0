"""A stand-in for `requests` with no network: `get` of the Cora archive
(``.../cora.tgz``) answers with a gzipped tar of ``cora/cora.content`` and
``cora/cora.cites`` written by the corpus's synthetic graph (`textdata/corpus_data.py`, a
planted-partition graph in Cora's format); any other URL raises `ConnectionError`.
pytorch/examples gcn/main.py downloads Cora on every run, with no flag to skip it."""

from __future__ import annotations

import io
import os
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

__version__ = "2.32.0"

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "textdata"))
import corpus_data


class ConnectionError(OSError):
    pass


class Response:
    def __init__(self, content: bytes) -> None:
        self.content = content
        self.raw = io.BytesIO(content)
        self.status_code = 200
        self.text = content.decode("latin-1")

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def raise_for_status(self) -> None:
        return None


def _cora_archive() -> bytes:
    nodes = int(os.environ.get("CORA_SHIM_NODES", "1800"))
    features = int(os.environ.get("CORA_SHIM_FEATURES", "280"))
    with tempfile.TemporaryDirectory() as tmp:
        corpus_data.write_cora(Path(tmp) / "cora", nodes, features, 7)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(Path(tmp) / "cora", arcname="cora")
    return buf.getvalue()


def get(url: str, *args: Any, **kwargs: Any) -> Response:
    if url.endswith("cora.tgz"):
        return Response(_cora_archive())
    raise ConnectionError(f"the corpus runs without network; no stand-in for {url}")

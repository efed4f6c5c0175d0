"""Install plotly.js's cartesian bundle (1.5 MB) for the dashboard from the npm registry.

The dashboard draws only scatter, heatmap and bar traces (``figures.py``), all in plotly.js's
``cartesian`` partial bundle, which the browser compiles in about a third of the time of the
full 4.8 MB bundle that the ``plotly`` Python package ships. No PyPI package serves that
bundle, so ``make install`` runs this script: it downloads the pinned npm package
(``PACKAGE@VERSION``, the plotly.js version of the installed ``plotly`` package), checks the
tarball against the pinned ``INTEGRITY`` (npm's sha512, as a lockfile would), and writes
``plotly-cartesian.min.js`` and its ``LICENSE`` to ``gradwatch_dashboard/vendor/`` (not in
git). Without it, or when the installed ``plotly`` draws with another plotly.js version, the
dashboard serves the full bundle from the ``plotly`` package, as before.

Usage::

    python scripts/fetch_plotly_bundle.py            # once, after pip install (make install)
    python scripts/fetch_plotly_bundle.py --check    # exit 1 unless installed and verified
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import sys
import tarfile
import urllib.request
from pathlib import Path

PACKAGE = "plotly.js-cartesian-dist-min"
VERSION = "4.1.1"
INTEGRITY = (  # npm view plotly.js-cartesian-dist-min@4.1.1 dist.integrity
    "sha512-o8GrFeusncwBIxbBynRJpY4pkgVB6caM+JLpwrLYbbsO7dZ8FJ+SVN2Fr+L7kiG/"
    "Z6w4P5O0Jus/Qr5EefHVeg=="
)
TARBALL = f"https://registry.npmjs.org/{PACKAGE}/-/{PACKAGE}-{VERSION}.tgz"
FILES = {"package/plotly-cartesian.min.js": "plotly-cartesian.min.js", "package/LICENSE": "LICENSE"}
DEST = Path(__file__).resolve().parent.parent / "dashboard" / "gradwatch_dashboard" / "vendor"


def integrity(data: bytes) -> str:
    """npm's ``dist.integrity`` of a tarball: ``sha512-`` and the base64 digest."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def fetch(dest: Path = DEST) -> Path:
    """Download, verify and unpack the bundle into ``dest``; the bundle's path."""
    with urllib.request.urlopen(TARBALL, timeout=120) as reply:
        data = reply.read()
    got = integrity(data)
    if got != INTEGRITY:
        raise SystemExit(f"{TARBALL} does not match the pinned integrity ({got} != {INTEGRITY})")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member, name in FILES.items():
            extracted = tar.extractfile(member)
            if extracted is None:
                raise SystemExit(f"{TARBALL} has no file {member}")
            (dest / name).write_bytes(extracted.read())
    (dest / "VERSION").write_text(f"{PACKAGE}@{VERSION} {INTEGRITY}\n")
    return dest / FILES["package/plotly-cartesian.min.js"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only say whether it is installed")
    args = p.parse_args()
    if args.check:
        stamp = DEST / "VERSION"
        ok = stamp.exists() and stamp.read_text().split() == [f"{PACKAGE}@{VERSION}", INTEGRITY]
        print(f"{PACKAGE}@{VERSION} {'installed' if ok else 'not installed'} in {DEST}")
        sys.exit(0 if ok else 1)
    print(f"installed {PACKAGE}@{VERSION} at {fetch()}")


if __name__ == "__main__":
    main()

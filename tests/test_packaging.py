"""gradwatch installs and works from a built wheel, ``pip install .`` and ``pip install -e .``
in a clean virtual environment (torch preinstalled there from the pinned 2.13.0 wheel)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMOKE = textwrap.dedent("""
    import os, sys, torch, gradwatch
    from gradwatch.reader import load_run  # the documented import path (a re-export)
    from gradwatch.core.spool import read_spool
    assert "site-packages" in gradwatch.__file__ or os.environ["MODE"] == "editable", \\
        gradwatch.__file__
    assert "fastapi" not in sys.modules and "dash" not in sys.modules
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradwatch.watch(model, opt, data_dir=sys.argv[1]) as run:
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(4, 3)).sum().backward()
            opt.step()
    kinds = [f.record.kind.name for f in read_spool(run.dir).frames]
    assert kinds[0] == "RUN_START" and kinds[-1] == "END", kinds
    assert [row.step for row in load_run(run.dir).steps[0]] == [1, 2, 3]
    from gradwatch.stats import hostnorms
    assert "gw_sumsq" in hostnorms.source()  # the kernel's source ships in every mode
    import importlib.util
    for name in ("gradwatch_server.app", "gradwatch_dashboard.dash_app"):  # found, not imported:
        spec = importlib.util.find_spec(name)  # their web stack is the [server] extra
        assert spec is not None and spec.origin.endswith(name.replace(".", "/") + ".py"), name
    print("ok", gradwatch.__version__)
""")


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert out.returncode == 0, f"{cmd}\n{out.stdout}\n{out.stderr}"
    return out  # type: ignore[no-any-return]


@pytest.mark.slow
def test_wheel_sdist_and_editable_installs_work_in_a_clean_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    py, pip = str(venv / "bin" / "python"), [str(venv / "bin" / "python"), "-m", "pip", "-q"]
    run([*pip, "install", "torch==2.13.0", "numpy>=1.24"])  # the base dependencies
    dist = tmp_path / "dist"
    run([*pip, "wheel", "--no-deps", "-w", str(dist), str(ROOT)])
    (wheel,) = dist.glob("gradwatch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # every module of the three packages (found by setuptools, not listed by hand), each at the
    # path its import name says
    sources = {
        p.relative_to(ROOT / top).as_posix()
        for top in ("collector", "server", "dashboard")
        for p in (ROOT / top).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert {"gradwatch_server/app.py", "gradwatch_dashboard/pages/run.py"} <= sources
    assert sources - set(names) == set()
    assert {
        "gradwatch_dashboard/assets/gradwatch.css",
        "gradwatch_server/migrations/script.py.mako",
    } <= set(names)
    assert "gradwatch/stats/hostnorms.c" in names  # the C kernel is package data
    work = tmp_path / "work"  # outside the source tree, so nothing is imported from it
    work.mkdir()
    (work / "smoke.py").write_text(SMOKE)
    for mode, target in [
        ("wheel", [str(wheel)]),
        ("sdist", [str(ROOT)]),
        ("editable", ["-e", str(ROOT)]),
    ]:
        run([*pip, "install", "--no-deps", *target], cwd=work)
        env = {**os.environ, "MODE": mode}
        out = run([py, "smoke.py", str(tmp_path / f"data-{mode}")], cwd=work, env=env)
        assert out.stdout.startswith("ok "), out.stdout
        cli = run([str(venv / "bin" / "gradwatch"), "--version"], cwd=work)
        assert cli.stdout.startswith("gradwatch ")
        run([*pip, "uninstall", "-y", "gradwatch"], cwd=work)

"""The monitor's first look at many new runs (``drift.live._first_looks``): batched
queries give what looking at the runs one by one with ``groups.reference`` gives, on
SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from gradwatch_server.db import make_engine, write_session
from gradwatch_server.drift.live import _first_looks, _first_seeds, _seed
from gradwatch_server.groupkey import group_key
from gradwatch_server.migrate import migrate
from gradwatch_server.models import DriftState, Fingerprint, GroupBaseline, Run
from gradwatch_server.read import groups, runs
from gradwatch_server.store import ensure_project, insert_ignore


def _seeds(seed: int | None) -> dict[str, Any]:
    return {"seeds": {"torch_initial_seed": seed, "torch_seed_user_set": seed is not None}}


# run id: (config, code, started_at, end_status, fingerprint rows, drift state seed or "-")
RUNS: dict[str, tuple[str | None, str | None, float | None, str | None, list[Any], Any]] = {
    # a finished run with a state is the reference of a later run of its seed
    "f1": ("cfgA", "codeX", 10.0, "finished", [("fast", 1, _seeds(1))], 1),
    "n1": ("cfgA", "codeX", 20.0, None, [("fast", 1, _seeds(1))], "-"),
    "n2": ("cfgA", "codeX", 21.0, None, [("fast", 1, _seeds(2))], "-"),  # group deferred
    "n0": ("cfgA", "codeX", 5.0, None, [("fast", 1, _seeds(1))], "-"),  # started before f1
    # a new finished run gets its state in the look and is the reference of the next one
    "m1": ("cfgA", None, 5.0, "finished", [("fast", 1, _seeds(1))], "-"),
    "m2": ("cfgA", None, 6.0, None, [("fast", 1, _seeds(1))], "-"),
    # code hash "none" is not the group of a NULL code hash (groups.in_group)
    "m3": ("cfgA", "none", 1.0, "finished", [("fast", 1, _seeds(1))], 1),
    # a pinned baseline with a state of the seed
    "p": ("cfgB", "codeY", 1.0, None, [("fast", 1, _seeds(3))], 3),
    "q": ("cfgB", "codeY", 2.0, None, [("fast", 1, _seeds(3))], "-"),
    # a pinned baseline that is new itself: its state counts for the runs after it
    "s": ("cfgC", "codeZ", 1.0, None, [("fast", 1, _seeds(5))], "-"),
    "t": ("cfgC", "codeZ", 2.0, None, [("fast", 1, _seeds(5))], "-"),
    # no seed; seeds overridden by a later fingerprint; the slow phase merged after the fast
    "u": ("cfgD", "codeW", 1.0, None, [], "-"),
    "v": ("cfgD", "codeW", 2.0, None, [("fast", 1, _seeds(7)), ("fast", 2, {"seeds": None})], "-"),
    "w": ("cfgD", "codeW", 3.0, None, [("slow", 1, _seeds(8)), ("fast", 2, _seeds(9))], "-"),
    "x": ("cfgD", "codeW", 4.0, None, [("fast", 1, {"seeds": {"$d": _seeds(4)["seeds"]}})], "-"),
    "y": ("cfgD", "codeW", 5.0, None, [("fast", 1, {"$d": _seeds(6)})], "-"),
    # not in a group
    "z": (None, None, None, None, [("fast", 1, _seeds(1))], "-"),
}
PINNED = {("cfgB:codeY"): "p", ("cfgC:codeZ"): "s"}
ORDER = ["n0", "n1", "n2", "m1", "m2", "q", "s", "t", "u", "v", "w", "x", "y", "z", "gone"]


def _fill(engine: Engine) -> None:
    with write_session(engine) as session:
        project = ensure_project(session, "p")
        for run_id, (config, code, started, status, prints, state) in RUNS.items():
            row = {"id": run_id, "project_id": project, "received_at": 0.0}
            row |= {"config_hash": config, "code_hash": code, "started_at": started}
            insert_ignore(session, Run, [row | {"end_status": status, "steps": 5}])
            for phase, seq, data in prints:
                fp = {"run_id": run_id, "seq": seq, "phase": phase}
                insert_ignore(session, Fingerprint, [fp | {"data": json.dumps(data)}])
            if state != "-":
                insert_ignore(session, DriftState, [{"run_id": run_id, "seed": state}])
        for key, run_id in PINNED.items():
            pin = {"project_id": project, "group_key": key, "run_id": run_id, "pinned_at": 0.0}
            insert_ignore(session, GroupBaseline, [pin])


def _one_by_one(engine: Engine, run_ids: list[str]) -> tuple[set[str], dict[str, Any]]:
    """What a look one run at a time with ``groups.reference`` gives (rolled back)."""
    done: set[str] = set()
    deferred: set[tuple[int, str]] = set()
    with Session(engine) as session, session.begin():
        for run_id in run_ids:
            run = session.get(Run, run_id)
            key = None if run is None else group_key(run.config_hash, run.code_hash)
            if run is None or key is None:
                continue
            seed = _seed(runs.fingerprint(session, run_id=run_id))
            if (run.project_id, key) in deferred or groups.reference(session, run, seed):
                deferred.add((run.project_id, key))
                continue
            insert_ignore(session, DriftState, [{"run_id": run_id, "seed": seed}])
            done.add(run_id)
        states = _states(session)
        session.rollback()
    return done, states


def _states(session: Session) -> dict[str, Any]:
    rows = session.execute(select(col(DriftState.run_id), col(DriftState.seed)))
    return {str(r): s for r, s in rows}


def test_first_looks_match_one_by_one(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        migrate(engine)
        _fill(engine)
        want_done, want_states = _one_by_one(engine, ORDER)
        with Session(engine) as session:
            seeds = _first_seeds(session, [r for r in RUNS if RUNS[r][0] is not None])
            assert seeds == {r: _seed(runs.fingerprint(session, run_id=r)) for r in seeds}
        assert seeds["v"] is None and seeds["w"] == 8 and seeds["x"] == 4 and seeds["y"] == 6
        done = _first_looks(engine, ORDER)
        assert done == want_done == {"n0", "m1", "s", "u", "v", "w", "x", "y"}
        with Session(engine) as session:
            assert _states(session) == want_states
    finally:
        engine.dispose()

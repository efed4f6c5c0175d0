"""Live drift detection: each run is compared, as its steps arrive, with its reference.

``drift_pass`` looks at every run in a replicate group with steps it has not compared yet
(table ``drift_states``), compares only those new steps with the reference (see
:func:`gradwatch_server.read.groups.reference`) using the collector's comparison core, and on
the first divergence stores one ``repro-drift`` finding and raises its alerts.
``envelope_pass`` recomputes the seed envelope of each group that received steps (one
run per seed, at least three seeds) and stores one ``seed-envelope`` finding for a run
that stays outside it. Both are idempotent: the server's findings use fixed negative
sequence numbers, so two server processes store each once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from gradwatch.core import checkids
from gradwatch.core.drift.envelope import leaving
from gradwatch.core.drift.verdict import compare, divergence
from gradwatch.core.records import fingerprint_order
from gradwatch_server.alerts.rules import raise_alerts
from gradwatch_server.db import write_session
from gradwatch_server.groupkey import group_key, parse_key
from gradwatch_server.jsontext import dump_json, load_json
from gradwatch_server.models import DriftState, Finding, GroupBaseline, Run
from gradwatch_server.read import groups, runs
from gradwatch_server.read.runload import load_run_data, loss_series
from gradwatch_server.store import insert_ignore, run_sql

log = logging.getLogger("gradwatch_server")
DRIFT_SEQ, ENVELOPE_SEQ = -1, -2
_HINTS = {
    "environment": "run both with the same library versions, devices and thread count "
    "(see the fingerprint difference), or compare with a tolerance",
    "config": "the runs are not replicates: compare runs of one config",
    "code": "the code changed between the runs: commit it and compare runs of one commit",
    "init": "seed every RNG before building the model (torch.manual_seed)",
    "data-order": "seed the DataLoader (generator=torch.Generator().manual_seed(...)) and "
    "its workers (worker_init_fn), and keep augmentations seeded",
    "forward-nondeterminism": "call torch.use_deterministic_algorithms(True) and set "
    "torch.backends.cudnn.benchmark = False",
    "backward-nondeterminism": "call torch.use_deterministic_algorithms(True) (atomic adds "
    "in backward kernels sum in a different order on every run)",
    "optimizer-nondeterminism": "use a deterministic optimizer implementation "
    "(foreach=False / fused=False) and deterministic algorithms",
}


def _seed(fingerprint: dict[str, Any]) -> int | None:
    seeds = fingerprint.get("seeds") or {}
    seed = seeds.get("torch_initial_seed")
    return int(seed) if seeds.get("torch_seed_user_set") and isinstance(seed, int) else None


def _store(session: Session, run_id: str, seq: int, finding: dict[str, Any]) -> None:
    row = {"run_id": run_id, "seq": seq, "idx": 0, "source": "server", "t": "null", **finding}
    if insert_ignore(session, Finding, [row], returning="seq"):
        raise_alerts(session, run_id, [row])


def _drift_finding(result: dict[str, Any], reference: str) -> dict[str, Any]:
    d = result["difference"] or {}
    size = f", relative difference {d['rel']:.3g}" if isinstance(d.get("rel"), float) else ""
    details = {k: v for k, v in result.items() if k != "per_tensor"} | {
        "reference": reference,
        "per_tensor": [t for t in result["per_tensor"] if t["first_step"] is not None][:50],
    }
    where, why = divergence(result, result["fingerprint_diff"])
    return {
        "check": checkids.REPRO_DRIFT,
        "severity": "warning",
        "step": result["step"],
        "optimizer": result["optimizer"],
        "param": result["param"],
        "message": f"this run diverged from its replicate {reference} at step "
        f"{result['step']} ({where}{size}): {why} (cause: {result['cause']}).",
        "hint": _HINTS.get(result["cause"], ""),
        "details": dump_json(details),
    }


def check_run(engine: Engine, run_id: str) -> str | None:
    """Compare the run's new steps with its reference; the verdict when one was reached.

    Reads in a plain session and writes only when there is something to store, so runs
    still waiting for a reference cost a few reads per pass and take no write lock.
    """
    with Session(engine) as session:
        run = session.get(Run, run_id)
        if run is None or group_key(run.config_hash, run.code_hash) is None:
            return None
        state = session.get(DriftState, run.id)
        if state is not None and (
            state.verdict in ("diverged", "not-comparable") or run.steps <= state.checked_step
        ):
            return None
        seed = state.seed if state is not None else _seed(runs.fingerprint(session, run_id=run.id))
        checked = 0 if state is None else state.checked_step
        ref_id = groups.reference(session, run, seed)
        ref = None if ref_id is None else session.get(Run, ref_id)
        result, compared = None, checked
        if ref is not None:
            mine = load_run_data(session, run, checked + 1)
            result = compare(load_run_data(session, ref, checked + 1, run.steps), mine)
            loaded = [s for t in mine.tracks.values() for s in t.steps.tolist()]
            compared = max((s for s in loaded if s <= ref.steps), default=checked)
            if ref.end_status is not None:  # nothing loaded can pair with a finished run later
                compared = max([compared, *loaded])
    if state is not None and ref is None:
        return None
    verdict = _verdict(result, compared > checked, "" if state is None else state.verdict)
    with write_session(engine) as session:
        insert_ignore(session, DriftState, [{"run_id": run_id, "seed": seed}])
        if result is not None and ref is not None:
            if verdict == "diverged":
                _store(session, run_id, DRIFT_SEQ, _drift_finding(result, ref.id))
            session.execute(
                update(DriftState)
                .where(col(DriftState.run_id) == run_id)
                .values(checked_step=compared, reference=ref.id, verdict=verdict)
            )
    return verdict or None


def _verdict(result: dict[str, Any] | None, progressed: bool, before: str) -> str:
    if result is None:
        return before
    if result["verdict"] == "not-comparable" and progressed and not result["steps_compared"]:
        return "not-comparable"
    if result["verdict"] in ("diverged", "identical"):
        return str(result["verdict"])
    return before


def drift_pass(engine: Engine) -> list[str]:
    """``check_run`` for every grouped run with uncompared steps; the runs that diverged.

    A run already looked at (it has a drift state) is skipped while it cannot have a
    reference: no seed, or no finished run with a drift state and no pinned baseline in
    its group. ``check_run`` would find none and return; skipping it here keeps a pass
    over many live runs of unfinished groups to two queries instead of three per run.
    """
    with Session(engine) as session:
        query = (
            select(
                col(Run.id),
                col(Run.project_id),
                col(Run.config_hash),
                col(Run.code_hash),
                col(DriftState.run_id).is_not(None),
                col(DriftState.seed),
            )
            .outerjoin(DriftState, col(DriftState.run_id) == col(Run.id))
            .where(
                col(Run.config_hash).is_not(None),
                (col(DriftState.run_id).is_(None))
                | (
                    col(DriftState.verdict).not_in(["diverged", "not-comparable"])
                    & (col(Run.steps) > col(DriftState.checked_step))
                ),
            )
            .order_by(col(Run.started_at), col(Run.id))
        )
        rows = session.execute(query).all()
        referable = _groups_with_references(session) if any(r[4] for r in rows) else set()
    candidates = [
        str(run_id)
        for run_id, project_id, config, code, has_state, seed in rows
        if not has_state
        or (seed is not None and (project_id, group_key(config, code)) in referable)
    ]
    try:
        looked = _first_looks(engine, [str(r[0]) for r in rows if not r[4]])
    except Exception as e:  # then check_run looks at each of them on its own
        log.warning("drift: first look at new runs: %s: %s", type(e).__name__, e)
        looked = set()
    candidates = [r for r in candidates if r not in looked]
    diverged = []
    for run_id in candidates:
        try:
            if check_run(engine, run_id) == "diverged":
                diverged.append(run_id)
        except Exception as e:  # one bad run must not stop the others
            log.warning("drift: run %s: %s: %s", run_id, type(e).__name__, e)
    return diverged


def _first_looks(engine: Engine, run_ids: list[str]) -> set[str]:
    """The new runs (no drift state yet, in the pass's order) that have no reference: their
    drift states (the seed) stored in one short transaction, as ``check_run`` would store
    each in its own; the rest is left to ``check_run``. Many runs starting at once then
    cost one write instead of one each.

    Seeds are read first, outside the write lock, with a few queries for all the runs
    (the database extracts each fingerprint's ``seeds`` from its JSON); references are
    looked up inside the lock from what a few queries return for all the runs' groups
    (:class:`_References`), in order, so a state stored for an earlier run counts for a
    later one exactly as when ``check_run`` went one by one; from the first run of a group
    that has a reference on, that group's runs are left to ``check_run`` (which compares
    them in the same order). The lock is held for those queries and one insert, not for
    per-run work.
    """
    if not run_ids:
        return set()
    with Session(engine) as session:
        runs = _look_rows(session, run_ids)
        seeds = _first_seeds(session, [r.id for r in runs])
    looks = [(run, seeds.get(run.id)) for run in runs]
    done: set[str] = set()
    deferred: set[tuple[int, str]] = set()
    if looks:
        with write_session(engine) as session:
            refs = _References(session, [run for run, _ in looks])
            states: list[dict[str, Any]] = []
            for run, seed in looks:
                group = (run.project_id, run.key)
                if group in deferred or refs.reference(run, seed, states) is not None:
                    deferred.add(group)
                    continue
                states.append({"run_id": run.id, "seed": seed})
                refs.stored(run, seed, states)
                done.add(run.id)
            if states:
                insert_ignore(session, DriftState, states)
    return done


@dataclass(frozen=True)
class _Look:
    """What a first look needs of a new run that is in a group."""

    id: str
    project_id: int
    key: str
    started_at: float | None
    finished: bool

    def in_group(self) -> tuple[str, str | None]:
        """(config hash, code hash or None) as ``groups.in_group`` matches its group's runs."""
        return parse_key(self.key)


_LOOK_SQL = (
    "SELECT id, project_id, config_hash, code_hash, started_at, end_status FROM runs "
    "WHERE id IN ({})"
)
#: a fingerprint's ``seeds`` as JSON text, read by the database (no JSON parse per
#: fingerprint here): (run, phase, seq, its JSON type or NULL when absent, the text, whether
#: the whole row is one ``$d`` tag, which only the Python reader unwraps)
_SEEDS_SQL = {
    "sqlite": "SELECT run_id, phase, seq, json_type(data, '$.seeds'), "
    "json_extract(data, '$.seeds'), substr(data, 1, 6) = '{{\"$d\":' FROM fingerprints "
    "WHERE run_id IN ({}) ORDER BY seq",
    "postgresql": "SELECT run_id, phase, seq, json_typeof(CAST(data AS json) -> 'seeds'), "
    "CAST(CAST(data AS json) -> 'seeds' AS text), substr(data, 1, 6) = '{{\"$d\":' "
    "FROM fingerprints WHERE run_id IN ({}) ORDER BY seq",
}
_IN_CHUNK = 500


def _in_chunks(session: Session, sql: str, ids: list[str]) -> list[tuple[Any, ...]]:
    """``sql`` (one ``IN ({})``) over ``ids`` in chunks; every row."""
    out: list[tuple[Any, ...]] = []
    for i in range(0, len(ids), _IN_CHUNK):
        part = ids[i : i + _IN_CHUNK]
        out += run_sql(session, sql.format(", ".join("?" * len(part))), part)
    return out


def _look_rows(session: Session, run_ids: list[str]) -> list[_Look]:
    """The runs among ``run_ids`` that exist and are in a group, in ``run_ids`` order."""
    found: dict[str, _Look] = {}
    for run_id, project_id, config, code, started_at, status in _in_chunks(
        session, _LOOK_SQL, run_ids
    ):
        key = group_key(config, code)
        if key is not None:
            found[str(run_id)] = _Look(
                str(run_id), int(project_id), key, started_at, status == "finished"
            )
    return [found[r] for r in run_ids if r in found]


def _first_seeds(session: Session, run_ids: list[str]) -> dict[str, int | None]:
    """Each run's seed as ``_seed(runs.fingerprint(...))`` gives it: the ``seeds`` of the
    last fingerprint that has the key (fast phase first, then by seq). A run whose seeds
    are no JSON object, or whose fingerprint is one ``$d`` tag, is read the long way."""
    sql = _SEEDS_SQL.get(session.get_bind().dialect.name, _SEEDS_SQL["postgresql"])
    rows = sorted(_in_chunks(session, sql, run_ids), key=lambda r: fingerprint_order(r[1], r[2]))
    last: dict[str, tuple[str | None, str | None]] = {}
    slow: set[str] = set()
    for run_id, _phase, _seq, kind, text, wrapped in rows:
        if wrapped:
            slow.add(str(run_id))
        elif kind is not None:
            last[str(run_id)] = (str(kind), None if text is None else str(text))
    out: dict[str, int | None] = {}
    for run_id in run_ids:
        kind, text = last.get(run_id, (None, None))
        if run_id in slow or kind not in (None, "null", "object"):
            out[run_id] = _seed(runs.fingerprint(session, run_id=run_id))
        else:
            seeds = load_json(text) if kind == "object" else None
            out[run_id] = _seed({"seeds": seeds})
    return out


_FINISHED_SQL = (
    "SELECT runs.id, runs.project_id, runs.config_hash, runs.code_hash, runs.started_at, "
    "drift_states.seed FROM runs JOIN drift_states ON drift_states.run_id = runs.id "
    "WHERE runs.end_status = 'finished' AND runs.config_hash IN ({}) "
    "ORDER BY runs.started_at, runs.id"
)
_PINNED_SQL = (
    "SELECT group_baselines.project_id, group_baselines.group_key, group_baselines.run_id, "
    "drift_states.seed, drift_states.run_id IS NOT NULL FROM group_baselines "
    "LEFT JOIN drift_states ON drift_states.run_id = group_baselines.run_id "
    "WHERE group_baselines.project_id IN ({})"
)


class _References:
    """``groups.reference`` for many runs of a first look from three queries, in the write
    transaction: the pinned baselines (with their seeds) and the finished runs with a drift
    state of the runs' groups, oldest first as the database orders them. A state stored
    during the look for a finished or pinned run changes what later runs find: that group
    is then looked up with ``groups.reference`` itself (the states so far inserted first),
    exactly as one by one."""

    def __init__(self, session: Session, runs: list[_Look]) -> None:
        self.session = session
        self.exact: set[tuple[int, str]] = set()
        self.pinned: dict[tuple[int, str], tuple[str, int | None, bool]] = {}
        projects = sorted({str(r.project_id) for r in runs})
        for project_id, key, run_id, seed, has_state in _in_chunks(session, _PINNED_SQL, projects):
            self.pinned[(int(project_id), str(key))] = (str(run_id), seed, bool(has_state))
        self.finished: dict[tuple[int, str, str | None, int], list[tuple[str, float | None]]] = {}
        configs = sorted({r.in_group()[0] for r in runs})
        for run_id, project_id, config, code, started_at, seed in _in_chunks(
            session, _FINISHED_SQL, configs
        ):
            if seed is not None:
                group = (int(project_id), str(config), code, int(seed))
                self.finished.setdefault(group, []).append((str(run_id), started_at))

    def reference(self, run: _Look, seed: int | None, states: list[dict[str, Any]]) -> str | None:
        """What ``groups.reference(session, run, seed)`` returns now."""
        if seed is None:
            return None
        group = (run.project_id, run.key)
        if group in self.exact:
            if states:
                insert_ignore(self.session, DriftState, states)
                states.clear()
            stored = self.session.get(Run, run.id)
            return None if stored is None else groups.reference(self.session, stored, seed)
        pin = self.pinned.get(group)
        if pin is not None and pin[0] == run.id:
            return None
        if pin is not None and pin[2] and pin[1] == seed:
            return pin[0]
        config, code = run.in_group()
        for other_id, started_at in self.finished.get((run.project_id, config, code, seed), []):
            if other_id == run.id:
                continue
            if (started_at or 0.0, other_id) >= (run.started_at or 0.0, run.id):
                return None
            return other_id
        return None

    def stored(self, run: _Look, seed: int | None, states: list[dict[str, Any]]) -> None:
        """``run`` got its drift state (queued in ``states``): a finished or pinned run
        changes the answers of its group from now on."""
        group = (run.project_id, run.key)
        pin = self.pinned.get(group)
        if run.finished or (pin is not None and pin[0] == run.id):
            self.exact.add(group)


def _groups_with_references(session: Session) -> set[tuple[int, str | None]]:
    """(project id, group key) of the groups where a run could find a reference."""
    finished = session.execute(
        select(col(Run.project_id), col(Run.config_hash), col(Run.code_hash))
        .join(DriftState, col(DriftState.run_id) == col(Run.id))
        .where(col(Run.end_status) == "finished", col(Run.config_hash).is_not(None))
        .distinct()
    ).all()
    out: set[tuple[int, str | None]] = {
        (int(p), group_key(config, code)) for p, config, code in finished
    }
    pinned = session.execute(select(col(GroupBaseline.project_id), col(GroupBaseline.group_key)))
    out.update((int(p), str(k)) for p, k in pinned)
    return out


def envelope_pass(engine: Engine, keys: set[tuple[int, str]] | None = None) -> list[str]:
    """Seed envelopes of the given (project id, group key)s (all groups when None)."""
    with Session(engine) as session:  # the columns used, not every run's whole row
        query = select(
            col(Run.id),
            col(Run.project_id),
            col(Run.config_hash),
            col(Run.code_hash),
            col(Run.started_at),
        ).where(col(Run.config_hash).is_not(None))
        runs = [_Member(*row) for row in session.execute(query)]
    by_group: dict[tuple[int, str], list[_Member]] = {}
    for run in runs:
        key = (run.project_id, str(group_key(run.config_hash, run.code_hash)))
        if keys is None or key in keys:
            by_group.setdefault(key, []).append(run)
    flagged: list[str] = []
    for (project_id, group), members in by_group.items():
        try:
            flagged += _envelope(engine, members)
        except Exception as e:  # one bad group must not stop the groups after it
            log.warning(
                "envelope: group %s of project %s: %s: %s", group, project_id, type(e).__name__, e
            )
    return flagged


@dataclass(frozen=True)
class _Member:
    """What the envelope needs of a run."""

    id: str
    project_id: int
    config_hash: str | None
    code_hash: str | None
    started_at: float | None


def _envelope(engine: Engine, members: list[_Member]) -> list[str]:
    with write_session(engine) as session:
        seeds = groups.seeds(session, [r.id for r in members])
        one_per_seed: dict[int, _Member] = {}
        for run in sorted(members, key=lambda r: (r.started_at or 0.0, r.id)):
            seed = seeds.get(run.id)
            if seed is not None:
                one_per_seed.setdefault(seed, run)
        if len(one_per_seed) < 3:
            return []
        losses = {run.id: loss_series(session, run.id) for run in one_per_seed.values()}
        out = []
        for run_id, step in leaving(losses).items():
            if step is None:
                continue
            finding = {
                "check": checkids.SEED_ENVELOPE,
                "severity": "warning",
                "step": step,
                "optimizer": 0,
                "param": None,
                "message": f"this run's loss left the envelope of its {len(losses)}-seed sweep "
                f"at step {step} (robust z-score > 4 for 20 steps): the other seeds agree "
                "with each other but not with it.",
                "hint": "look for what differs in this run besides the seed (data, code "
                "paths taken, a silent bug); compare it with a sibling: gradwatch compare",
                "details": dump_json({"seeds": sorted(one_per_seed), "runs": sorted(losses)}),
            }
            _store(session, run_id, ENVELOPE_SEQ, finding)
            out.append(run_id)
        return out

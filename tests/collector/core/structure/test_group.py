"""A replicate group's invariants: learned from its good runs, broken by a replicate."""

from __future__ import annotations

import torch
from torch import nn

import gradwatch
from gradwatch import cli
from gradwatch.core.structure.group import PERSIST, Invariants, Member, check, first_lasting, learn
from gradwatch.core.structure.signature import StepShape
from tests.own_process import in_own_process

CONFIG = {"lr": 0.01, "width": 8}


@in_own_process
def replicate(name: str, seed: int, *, frozen_embedding: bool = False, steps: int = 30) -> str:
    """One run of the group: an embedding and a head, the embedding frozen on request."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Embedding(10, 8), nn.Flatten(), nn.Linear(16, 1))
    if frozen_embedding:
        model[0].requires_grad_(False)  # the stale flag of one replicate
    opt = torch.optim.SGD([p for p in model.parameters()], lr=0.01)
    with gradwatch.watch(model, opt, name=name, config=CONFIG) as run:
        for _ in range(steps):
            opt.zero_grad()
            model(torch.randint(0, 10, (4, 2))).pow(2).mean().backward()
            opt.step()
    return run.id


def structure(run_id: str) -> list[dict[str, object]]:
    """The run's structure findings: the changes the collector stored with the run, and
    the group's invariants it breaks (derived when read)."""
    from gradwatch.commands.findings import local_findings, structure_findings
    from gradwatch.core.paths import data_dir, runs_dir

    run_dir = runs_dir(data_dir(None)) / run_id
    kinds = ("structure-change", "structure-safeguard")
    stored = [f for f in local_findings(run_dir) if f["check"] in kinds]
    return stored + structure_findings(run_dir)


def test_a_replicate_whose_embedding_gets_no_gradient_breaks_the_group() -> None:
    replicate("replicate-a", 1)
    replicate("replicate-b", 2)
    bad = replicate("replicate-c", 3, frozen_embedding=True)
    found = [f for f in structure(bad) if f["severity"] != "info"]
    assert [(f["check"], f["severity"], f["step"]) for f in found] == [
        ("group-invariant", "warning", 1)
    ]
    assert found[0]["message"] == (
        "0.weight received a gradient on every step in runs replicate-a, replicate-b; "
        "in this run it has none from step 1."
    )


def test_a_third_good_replicate_with_another_seed_breaks_nothing() -> None:
    replicate("replicate-a", 1)
    replicate("replicate-b", 2)
    good = replicate("replicate-c", 3)
    assert structure(good) == []


def test_one_good_run_teaches_nothing() -> None:
    replicate("replicate-a", 1)
    assert structure(replicate("replicate-c", 3, frozen_embedding=True)) == []


def test_findings_prints_the_break_and_fail_on_warning_gates_it(capsys) -> None:  # type: ignore[no-untyped-def]
    replicate("replicate-a", 1)
    replicate("replicate-b", 2)
    bad = replicate("replicate-c", 3, frozen_embedding=True)
    code = cli.main(["findings", bad, "--fail-on", "warning"])
    out = capsys.readouterr().out
    assert code == 1
    assert "group-invariant step 1: 0.weight received a gradient on every step" in out


def _member(flags: list[bool], lifecycles: list[str] | None = None) -> Member:
    cycles = lifecycles or ["zero_grad backward step"] * len(flags)
    shapes = [StepShape(i + 1, c, (g,)) for i, (g, c) in enumerate(zip(flags, cycles, strict=True))]
    return Member("r", "r", ("c", "k"), (("w",),), "finished", False, shapes={0: shapes})


def test_one_step_without_a_gradient_does_not_break_always() -> None:
    inv = Invariants(["a", "b"], {0: [0]}, {0: []}, {0: frozenset({"zero_grad backward step"})})
    once = [True] * 10 + [False] + [True] * 10
    assert check(_member(once), inv) == []
    lasting = [True] * 10 + [False] * PERSIST + [True] * 5
    assert [f["step"] for f in check(_member(lasting), inv)] == [11]


def test_a_lifecycle_outside_the_learned_ones_that_lasts_is_a_break() -> None:
    inv = Invariants(["a", "b"], {0: []}, {0: []}, {0: frozenset({"zero_grad backward step"})})
    cycles = ["zero_grad backward step"] * 10 + ["backward step"] * 10
    found = check(_member([True] * 20, cycles), inv)
    assert [f["step"] for f in found] == [11]
    assert "'backward step' from step 11" in str(found[0]["message"])


def test_learn_needs_two_good_runs_and_keeps_what_held_in_all() -> None:
    a = _member([True] * 5)
    b = _member([True, True, False, True, True])
    assert learn([a]) is None
    inv = learn([a, b])
    assert inv is not None and inv.always == {0: []} and inv.never == {0: []}
    assert learn([a, a]).always == {0: [0]}  # type: ignore[union-attr]


def test_first_lasting_needs_persist_steps_or_the_whole_run() -> None:
    assert first_lasting([True, True, True]) == 0  # a run shorter than PERSIST: all of it
    assert first_lasting([False, True, True]) is None
    assert first_lasting([True] + [False] * 10) is None
    assert first_lasting([False] * 3 + [True] * PERSIST) == 3


@in_own_process
def clipped_replicate(
    name: str, seed: int, *, weight_decay: float = 0.05, clip: bool = True
) -> str:
    """One run of a group that clips and decays its weights (both dropped on request)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=weight_decay)
    with gradwatch.watch(model, opt, name=name, config=CONFIG) as run:
        for _ in range(30):
            opt.zero_grad()
            model(torch.randn(4, 4)).pow(2).mean().backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    return run.id


def test_a_replicate_without_its_weight_decay_or_its_clipping_breaks_the_group() -> None:
    clipped_replicate("replicate-a", 1)
    clipped_replicate("replicate-b", 2)
    assert structure(clipped_replicate("replicate-c", 3)) == []
    found = structure(clipped_replicate("replicate-d", 4, weight_decay=0.0))
    assert [(f["check"], f["step"]) for f in found] == [("group-invariant", 1)]
    assert found[0]["message"] == (
        "param group 0's weight_decay was '0.05' on every step in runs replicate-a, "
        "replicate-b, replicate-c; in this run it is '0.0' from step 1."
    )
    found = structure(clipped_replicate("replicate-e", 5, clip=False))
    assert [(f["check"], f["step"]) for f in found] == [("group-invariant", 1)]
    assert "in this run steps are 'zero_grad backward step' from step 1" in found[0]["message"]


def test_runs_one_process_makes_one_after_another_are_not_replicates() -> None:
    """A script that trains one run per setting (a loop over schedulers or weight decays)
    makes runs of one config and code that differ on purpose: not a group."""
    make = clipped_replicate.__wrapped__  # type: ignore[attr-defined]
    make("same-process-a", 0)
    make("same-process-b", 1)
    odd = make("same-process-c", 2, weight_decay=0.0)
    assert not [f for f in structure(odd) if f["check"] == "group-invariant"]


@in_own_process
def autocast_replicate(name: str, seed: int, *, autocast: bool = True) -> str:
    """One run of a group that trains under bf16 autocast (off on request: a stale flag)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt, name=name, config=CONFIG) as run:
        for _ in range(30):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = model(torch.randn(4, 4))
            out.float().pow(2).mean().backward()
            opt.step()
    return run.id


def test_a_replicate_without_autocast_breaks_the_group() -> None:
    autocast_replicate("replicate-a", 1)
    autocast_replicate("replicate-b", 2)
    assert structure(autocast_replicate("replicate-c", 3)) == []
    found = structure(autocast_replicate("replicate-d", 4, autocast=False))
    assert [(f["check"], f["severity"], f["step"]) for f in found] == [
        ("group-invariant", "warning", 1)
    ]
    assert found[0]["message"] == (
        "the training forward's autocast state was 'cpu bfloat16' on every step in runs "
        "replicate-a, replicate-b, replicate-c; in this run it is 'off' from step 1."
    )


@in_own_process
def by_design_replicate(name: str, seed: int) -> str:
    """One run of a group whose structure moves by design on every replicate alike: an
    evaluation every 10 steps (train() restored), two micro-batches per step, clipping
    switched on after a 20-step warm-up by configuration, warm-up then cosine, bf16
    autocast, and the first layer unfrozen at step 30."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.ReLU(), nn.Linear(8, 1))
    model[0].requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=20)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 40)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cosine], milestones=[20])
    config = {**CONFIG, "clip_after": 20}
    with gradwatch.watch(model, opt, name=name, config=config) as run:
        for step in range(1, 61):
            if step == 30:
                model[0].requires_grad_(True)
            opt.zero_grad()
            for _ in range(2):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = model(torch.randn(4, 4))
                (out.float().pow(2).mean() / 2).backward()
            if step > config["clip_after"]:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if step % 10 == 0:
                model.eval()
                with torch.no_grad():
                    model(torch.randn(4, 4))
                model.train()
    return run.id


def test_a_group_whose_structure_moves_by_design_breaks_nothing() -> None:
    """Periodic patterns and by-design changes, the same in every replicate: the third
    replicate breaks no invariant, and its own changes (clipping on at step 21, the layer
    unfrozen at step 30) are info."""
    by_design_replicate("replicate-a", 1)
    by_design_replicate("replicate-b", 2)
    found = structure(by_design_replicate("replicate-c", 3))
    assert [f for f in found if f["severity"] != "info"] == []
    assert sorted(int(f["step"]) for f in found) == [21, 30]


def test_replicates_of_one_name_are_told_apart_by_their_ids() -> None:
    good = [
        Member(f"20261207T0{i}-abcd000{i}", "train", ("c", "h"), (("w",),), "finished", False,
               shapes={0: [StepShape(s, "zero_grad backward step", (True,)) for s in (1, 2)]})
        for i in (1, 2)
    ]  # fmt: skip
    inv = learn(good)
    assert inv is not None
    assert inv.runs == ["train (abcd0001)", "train (abcd0002)"]

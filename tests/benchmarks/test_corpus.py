"""benchmarks/corpus: the runner's own logic (program lists, digests, merging batches,
materialising a pinned tree from a local mirror), on a tiny local git repository and a
tiny training script; no network."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "corpus"
sys.path.insert(0, str(CORPUS))
import launch as lc  # noqa: E402
import materialize as mz  # noqa: E402
import run as runner  # noqa: E402
import spec  # noqa: E402

COMMIT = "0123456789abcdef0123456789abcdef01234567"

TINY = """\
import torch
torch.nn.Module.__module__
model = torch.nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    opt.zero_grad()
    model(torch.randn(4, 3)).pow(2).mean().backward()
    opt.step()
print("done in 0.123s")
"""


def git(*args: str, cwd: Path) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def make_mirror(tmp_path: Path) -> tuple[Path, str]:
    """A work repo with two files and a bare mirror of it at mirrors/me+tiny/repo."""
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "train.py").write_text(TINY)
    (work / "data.txt").write_text("payload\n")
    git("init", "-q", cwd=work)
    git("add", "-A", cwd=work)
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    git(*ident, "commit", "-q", "-m", "one", cwd=work)
    commit = git("rev-parse", "HEAD", cwd=work)
    mirrors = tmp_path / "mirrors"
    git("clone", "-q", "--bare", str(work), str(mirrors / "me+tiny" / "repo"), cwd=tmp_path)
    return mirrors, commit


def test_a_program_names_itself_and_checks_its_fields() -> None:
    p = spec.Program("a/b", COMMIT, "x/train.py", args=("--n", "1"))
    assert p.name == "a/b:x/train.py" and p.workdir == "x"
    assert spec.Program("a/b", COMMIT, "t.py", variant="amp").name == "a/b:t.py [amp]"
    assert spec.Program("a/b", COMMIT, "t.py", cwd="y").workdir == "y"
    with pytest.raises(ValueError, match="40 hex"):
        spec.Program("a/b", "abc", "t.py")
    with pytest.raises(ValueError, match="unknown tags"):
        spec.Program("a/b", COMMIT, "t.py", tags=("cnnn",))
    with pytest.raises(ValueError, match="no shim folder"):
        spec.Program("a/b", COMMIT, "t.py", shims=("nope",))


def test_all_programs_collects_every_programs_file_and_refuses_twins(tmp_path: Path) -> None:
    one = f"from spec import Program\nPROGRAMS = [Program('a/b', '{COMMIT}', 't.py')]\n"
    two = f"from spec import Program\nPROGRAMS = [Program('c/d', '{COMMIT}', 'u.py')]\n"
    (tmp_path / "programs_x.py").write_text(one)
    (tmp_path / "programs_y.py").write_text(two)
    (tmp_path / "other.py").write_text("PROGRAMS = [1]\n")
    assert [p.name for p in spec.all_programs(tmp_path)] == ["a/b:t.py", "c/d:u.py"]
    (tmp_path / "programs_y.py").write_text(one)
    with pytest.raises(ValueError, match="two programs are named"):
        spec.all_programs(tmp_path)


def test_the_committed_corpus_is_well_formed() -> None:
    programs = spec.all_programs()
    assert len(programs) >= 10
    assert all(p.steps >= 300 and p.seeds for p in programs)


def test_stdout_is_compared_without_its_timings() -> None:
    a = "epoch 1 loss 0.51234\ntook 1.23s\n12:01:02 step 3 | 45.1 ms/batch\nat 0x7f00aa"
    b = "epoch 1 loss 0.51234\ntook 9.87s\n13:11:12 step 4 | 99.0 ms/batch\nat 0x7f11bb"
    assert lc.normalise_stdout(a) == lc.normalise_stdout(b)
    c = a.replace("0.51234", "0.51235")
    assert lc.normalise_stdout(a) != lc.normalise_stdout(c)
    params = {"params": "ab", "steps": [3]}
    assert lc.combine_digest(params, a) == lc.combine_digest(dict(params), b)
    assert lc.combine_digest(params, a) != lc.combine_digest({**params, "params": "cd"}, a)


def test_a_duration_written_as_one_word_is_one_token_whatever_its_units() -> None:
    """A progress bar's ``1s674ms`` in one mode and ``987ms`` at the same batch in the
    other (the two pass a second at different batches): the same line once masked (the
    parameters' digest, not this line, tells the two trainings apart)."""
    a = " [====>....]  Step: 1s674ms | Tot: 5s12ms | Loss: 2.301 | Acc: 10.0%"
    b = " [====>....]  Step: 987ms | Tot: 4s990ms | Loss: 2.301 | Acc: 10.0%"
    assert lc.normalise_stdout(a) == lc.normalise_stdout(b)
    assert lc.normalise_stdout(a).count("#t") == 2 and "Loss: #" in lc.normalise_stdout(a)
    assert lc.normalise_stdout(a) != lc.normalise_stdout(a.replace("Loss", "Lost"))


def test_a_fixed_width_timing_field_masks_its_padding_too() -> None:
    """locuslab/TCN prints ``ms/batch {:5.2f}``: `` 8.37`` in one mode, ``12.34`` in the
    other at the same batch. Masked, both lines are one (the numbers of a timing line are
    all masked: the parameters' digest, not this line, tells the two trainings apart)."""
    line = "| Epoch   1 |   100/  313 batches | lr 0.00050 | ms/batch {} | loss 0.21870000"
    a, b = line.format(" 8.37"), line.format("12.34")
    assert lc.normalise_stdout(a) == lc.normalise_stdout(b)
    assert lc.normalise_stdout(a) != lc.normalise_stdout(a.replace("loss", "lost"))


def test_a_time_column_of_a_table_is_masked_in_its_rows() -> None:
    """swa_gaussian prints one row of numbers per epoch under a header that names its
    last column ``time`` (the header alone on the first epoch): that column's numbers are
    masked in the rows, the others compared; a line of other words ends the table."""
    header = (
        "  ep      lr    tr_loss  swa_te_acc      time\n"
        "----  ------  ---------  ----------  --------"
    )
    row = "   {}  0.0500     1.8353     96.5625    {}"
    a = "\n".join([header, row.format(1, "3.7690"), row.format(2, "3.4884"), "done 2.5"])
    b = "\n".join([header, row.format(1, "2.1122"), row.format(2, "9.0001"), "done 2.5"])
    assert lc.normalise_stdout(a) == lc.normalise_stdout(b)
    assert lc.normalise_stdout(a) != lc.normalise_stdout(a.replace("1.8353", "1.8354"))
    assert lc.normalise_stdout(a) != lc.normalise_stdout(a.replace("done 2.5", "done 2.6"))
    assert "96.5625" in lc.normalise_stdout(a)


def _launch(code: int | None, digest: str, steps: int | None = 300) -> lc.Launch:
    return lc.Launch(code, "", "boom" if code else "", 1.0, digest, steps)


def test_a_record_says_what_went_wrong_first() -> None:
    p = spec.Program("a/b", COMMIT, "t.py")
    alarm = {"check": "x", "severity": "warning", "step": 3, "message": "m"}
    watched = _launch(0, "d")
    watched.findings = [alarm, dict(alarm)]
    rec = runner.record(p, [0], [(_launch(0, "d"), watched)])
    assert rec["status"] == "ok" and rec["outputs_identical"] and rec["findings"] == [alarm]
    assert runner.record(p, [0], [(_launch(0, "d"), _launch(0, "e"))])["status"] == (
        "outputs-differ"
    )
    assert runner.record(p, [0], [(_launch(1, "d"), _launch(0, "d"))])["status"] == (
        "program-failed"
    )
    failed = runner.record(p, [0], [(_launch(0, "d"), _launch(1, "d"))])
    assert failed["status"] == "failed-under-gradwatch" and failed["stderr_tail"] == "boom"
    short = runner.record(p, [0, 1], [(_launch(0, "d", 10), _launch(0, "d", 10))] * 2)
    assert short["status"] == "too-few-steps" and short["steps"] == 10


def test_a_batch_replaces_its_own_records_and_keeps_the_rest() -> None:
    old = {"date": "old", "programs": [{"name": "b", "v": 1}, {"name": "a", "v": 1}]}
    doc = runner.merge(old, [{"name": "b", "v": 2}, {"name": "c", "v": 2}], {"date": "new"})
    assert doc["date"] == "new"
    assert [(r["name"], r["v"]) for r in doc["programs"]] == [("a", 1), ("b", 2), ("c", 2)]
    assert runner.merge(None, [{"name": "x"}], {})["programs"] == [{"name": "x"}]


def test_a_plain_rerun_keeps_the_programs_replicate_group() -> None:
    group = {"seeds": [0, 1, 2], "date": "then"}
    old = {"programs": [{"name": "a", "v": 1, "replicates": group}, {"name": "b", "v": 1}]}
    doc = runner.merge(old, [{"name": "a", "v": 2}, {"name": "b", "v": 2}], {})
    assert doc["programs"] == [
        {"name": "a", "v": 2, "replicates": group},
        {"name": "b", "v": 2},
    ]
    newer = {"seeds": [0, 1, 2], "date": "now"}
    doc = runner.merge(old, [{"name": "a", "v": 3, "replicates": newer}], {})
    assert doc["programs"][0]["replicates"] == newer


def test_materialize_extracts_the_pinned_commit_once_and_runs_setup_once(tmp_path: Path) -> None:
    mirrors, commit = make_mirror(tmp_path)
    p = spec.Program(
        "me/tiny", commit, "sub/train.py", setup=("echo x >> sub/setup.log; echo $PYTHON > py",)
    )
    dest = tmp_path / "tree"
    cache = tmp_path / "cache"
    assert mz.materialize(p, dest, mirrors=mirrors, cache=cache) == dest
    assert (dest / "sub" / "train.py").read_text() == TINY and not (dest / ".git").exists()
    assert (dest / "py").read_text().strip() == sys.executable
    (dest / "data.txt").write_text("kept\n")
    mz.materialize(p, dest, mirrors=mirrors, cache=cache)
    assert (dest / "data.txt").read_text() == "kept\n"  # not extracted again
    assert (dest / "sub" / "setup.log").read_text() == "x\n"  # setup ran once


def test_materialize_writes_what_a_mirror_holds_when_a_blob_is_missing(tmp_path: Path) -> None:
    mirrors, commit = make_mirror(tmp_path)
    bare = mirrors / "me+tiny" / "repo"
    blob = git("rev-parse", f"{commit}:data.txt", cwd=bare)
    (bare / "objects" / blob[:2] / blob[2:]).unlink()
    dest = tmp_path / "tree"
    mz.materialize(spec.Program("me/tiny", commit, "sub/train.py"), dest, mirrors=mirrors)
    assert (dest / "sub" / "train.py").read_text() == TINY
    assert (dest / mz.MISSING_MARK).read_text() == "data.txt\n"


@pytest.mark.slow  # three python processes importing torch
def test_launch_digests_the_trained_parameters_under_the_seed(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TINY)
    p = spec.Program("me/tiny", COMMIT, "train.py")
    runs = [
        lc.launch(p, tmp_path, seed=s, gradwatch=False, data_dir=tmp_path / "gw") for s in (0, 0, 1)
    ]
    assert all(r.ok for r in runs), runs[0].stderr
    assert runs[0].steps == 5 and runs[0].params is not None
    assert (runs[0].steps_kind, runs[0].backward, runs[0].params["hand_updates"]) == (
        "optimizer",
        5,
        0,
    )
    assert runs[0].params["optimizers"] == ["SGD"] and runs[0].params["tensors"] == 2
    assert runs[0].digest == runs[1].digest != runs[2].digest


HAND = """\
import torch
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
for step in range(7):
    model.zero_grad()
    model(torch.randn(5, 3)).pow(2).mean().backward()
    if step != 3:  # one backward pass with no update after it
        for p in model.parameters():
            p.data -= 0.1 * p.grad.data
model(torch.randn(2, 3)).sum().backward()  # a last backward pass, never applied
print("done")
"""


@pytest.mark.slow  # three python processes importing torch
def test_a_program_that_updates_by_hand_counts_its_updates_not_its_backward_passes(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text(HAND)
    p = spec.Program("me/hand", COMMIT, "train.py")
    runs = [
        lc.launch(p, tmp_path, seed=s, gradwatch=False, data_dir=tmp_path / "gw") for s in (0, 0, 1)
    ]
    assert all(r.ok for r in runs), runs[0].stderr
    assert runs[0].params is not None and runs[0].params["optimizers"] == []
    assert (runs[0].steps, runs[0].steps_kind, runs[0].backward) == (6, "hand", 8)
    assert runs[0].params["hand_tensors"] == 4
    assert runs[0].digest == runs[1].digest != runs[2].digest  # the hand-updated values count
    rec = runner.record(p, [0], [(runs[0], runs[1])])
    assert rec["steps"] == 6 and rec["steps_kind"].startswith("hand updates")
    assert rec["backward_passes"] == 8 and rec["status"] == "too-few-steps"


REPLICA = """\
import os
import torch
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
if os.environ.get("GW_CORPUS_SEED") == os.environ.get("FROZEN_SEED"):  # a stale flag
    model[0].weight.requires_grad_(False)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(40):
    opt.zero_grad()
    model(torch.randn(8, 3)).pow(2).mean().backward()
    opt.step()
"""


@pytest.mark.slow  # six runs under gradwatch
@pytest.mark.parametrize("frozen", ["", "2"])
def test_replicates_report_what_breaks_the_groups_invariants(tmp_path: Path, frozen: str) -> None:
    (tmp_path / "train.py").write_text(REPLICA)
    p = spec.Program("me/replica", COMMIT, "train.py", env=(("FROZEN_SEED", frozen),))
    kept = tmp_path / "kept"
    reps = runner.run_replicates(p, [0, 1, 2], tmp_path / "cache", tree=tmp_path, keep=kept)
    assert reps["runs"] == 3 and all(x["ok"] for x in reps["launches"])
    held = reps["group"]["invariants"]["grads_always"]  # learned from all three runs
    assert reps["group"]["formed"] and held == (3 if frozen else 4)
    assert (kept / "runs").is_dir() == bool(frozen)  # only an alarmed group's data is kept
    broken = [f for f in reps["group_findings"] if f["check"] == "group-invariant"]
    if not frozen:
        assert reps["group_findings"] == []
    else:  # the third replicate's frozen weight, from its first step
        assert [f["details"]["tensors"] for f in broken] == [["0.weight"]], broken
        assert broken[0]["run"] == reps["launches"][2]["runs"][0]


ROUNDS = """\
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(3, 1)
for round in range(2):  # a new optimizer per round (pruning rounds, federated clients)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(20):
        opt.zero_grad()
        model(torch.randn(8, 3)).pow(2).mean().backward()
        opt.step()
"""


@pytest.mark.slow  # three processes under gradwatch, two runs each
def test_replicates_of_a_program_with_several_runs_per_process_group_by_position(
    tmp_path: Path,
) -> None:
    """Runs of one process are never replicates of each other: the k-th runs of the seeds
    are one group, for each k."""
    (tmp_path / "train.py").write_text(ROUNDS)
    p = spec.Program("me/rounds", COMMIT, "train.py")
    reps = runner.run_replicates(p, [0, 1, 2], tmp_path / "cache", tree=tmp_path)
    assert [len(x["runs"]) for x in reps["launches"]] == [2, 2, 2]
    assert reps["group"]["formed"] and reps["group"]["positions"] == 2, reps["group"]
    assert reps["group"]["invariants"]["grads_always"] == 4  # 2 tensors in each position
    assert reps["group_findings"] == []


def test_prune_drops_the_records_of_programs_no_longer_listed(tmp_path: Path) -> None:
    listed = spec.all_programs()[0].name
    out = tmp_path / "corpus.json"
    rec = {
        "project": "a/b", "commit": COMMIT, "status": "ok", "outputs_identical": True,
        "findings": [], "steps": 300, "seeds": [0], "seconds": {"without": 1, "with": 2},
    }  # fmt: skip
    doc = {
        "command": "c", "date": "d", "gradwatch_commit": "g",
        "machine": {"platform": "p", "cpus": 1, "python": "3", "torch": "2"},
        "programs": [{**rec, "name": listed}, {**rec, "name": "gone/x:y.py"}],
    }  # fmt: skip
    out.write_text(json.dumps(doc))
    assert runner.main(["--prune", "--out", str(out)]) == 0
    assert [r["name"] for r in json.loads(out.read_text())["programs"]] == [listed]
    assert "gone/x:y.py" not in out.with_suffix(".md").read_text()


CUDA_SCRIPT = """\
import torch
model = torch.nn.Linear(3, 2).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(50):
    opt.zero_grad()
    model(torch.randn(4, 3).cuda()).pow(2).mean().backward()
    opt.step()
print("finished")
"""


@pytest.mark.slow  # two python processes importing torch
def test_the_seed_shims_step_cap_and_cuda_as_cpu(tmp_path: Path) -> None:
    # a program written for one GPU, with no option for fewer steps: the shim's opt-in
    # stand-ins run it on the CPU and stop it after N steps, digest written, exit 0
    (tmp_path / "train.py").write_text(CUDA_SCRIPT)
    env = (("GW_CORPUS_CUDA_AS_CPU", "1"), ("GW_CORPUS_MAX_STEPS", "7"))
    p = spec.Program("me/tiny", COMMIT, "train.py", env=env)
    r = lc.launch(p, tmp_path, seed=0, gradwatch=False, data_dir=tmp_path / "gw")
    assert r.ok, r.stderr
    assert r.steps == 7 and "finished" not in r.stdout
    import torch

    bare = spec.Program("me/tiny", COMMIT, "train.py")  # without them .cuda() fails here
    if not torch.cuda.is_available():
        failed = lc.launch(bare, tmp_path, seed=0, gradwatch=False, data_dir=tmp_path / "gw")
        assert not failed.ok


def test_merge_folds_parallel_result_files(tmp_path: Path) -> None:
    import merge

    def program(name: str, status: str, replicates: bool = False) -> dict[str, object]:
        rec: dict[str, object] = {
            "name": name, "project": name.split(":")[0], "commit": COMMIT, "status": status,
            "steps": 300, "seeds": [0], "outputs_identical": True, "findings": [], "tags": [],
            "seconds": {"without": 1.0, "with": 1.2},
        }  # fmt: skip
        if replicates:
            rec["replicates"] = {
                "seeds": [0, 1, 2],
                "group": {"formed": True},
                "group_findings": [],
            }
        return rec

    head = {"date": "2026-12-07 12:00 UTC", "gradwatch_commit": COMMIT,
            "machine": runner.machine()}  # fmt: skip
    old = {**head, "command": "run.py", "programs": [program("a/x:t.py", "ok", True),
                                                     program("b/y:t.py", "ok")]}  # fmt: skip
    new = {**head, "command": "run.py --only a", "programs": [program("a/x:t.py", "failed")]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    out = tmp_path / "corpus.json"
    doc = merge.merge_corpus(out, [tmp_path / "old.json", tmp_path / "new.json"])
    a = next(r for r in doc["programs"] if r["name"] == "a/x:t.py")
    assert a["status"] == "failed" and "replicates" in a  # the group kept, as run.py does
    assert doc["summary"]["programs"] == 2 and doc["summary"]["ok"] == 1
    assert doc["command"] == "run.py; then run.py --only a"
    assert out.with_suffix(".md").is_file()


def test_a_loud_or_inert_mutant_is_not_counted() -> None:
    import inject

    def case(caught: bool, loud: bool = False, inert: bool = False) -> dict[str, object]:
        return {"program": "p", "bug_class": "detach-loss", "caught": caught, "loud": loud,
                "inert": inert, "incidents": 1 if caught else 0, "root_first": caught}  # fmt: skip

    cases = [case(True), case(False), case(False, loud=True), case(False, inert=True)]
    s = inject.summary(cases)
    assert (s["pairs"], s["caught"], s["loud"], s["inert"]) == (2, 1, 1, 1)
    assert s["catch_rate"] == 0.5

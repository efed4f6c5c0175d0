"""benchmarks/corpus/mutate.py on small loops of the styles real programs use (a plain loop
over a DataLoader, epoch + batch loops with a scheduler, a train() function with gradient
accumulation, a trainer class with a GradScaler, a GAN with two optimizers), each
mutation's result checked statement by statement; and one mutant run under
`gradwatch run` end to end (benchmarks/corpus/inject.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks import loops

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "corpus"))
import inject  # noqa: E402
import mutate  # noqa: E402


def lines(source: str) -> list[str]:
    """The statements of a source, one stripped line each (ast.unparse's layout)."""
    return [line.strip() for line in ast.unparse(ast.parse(source)).splitlines()]


def mutant(style: str, bug: str) -> list[str]:
    out = mutate.apply(loops.ALL[style], bug)
    assert out is not None, f"{bug} should apply to {style}"
    compile(out, style, "exec")
    return lines(out)


def added(style: str, bug: str) -> list[str]:
    """Lines of the mutant that the original does not have (in mutant order)."""
    before = lines(loops.ALL[style])
    rest = list(before)
    out = []
    for line in mutant(style, bug):
        if line in rest:
            rest.remove(line)
        else:
            out.append(line)
    return out


def removed(style: str, bug: str) -> list[str]:
    after = mutant(style, bug)
    out = []
    for line in lines(loops.ALL[style]):
        if line in after:
            after.remove(line)
        else:
            out.append(line)
    return out


def order(text: list[str], *wanted: str) -> list[int]:
    return [text.index(w) for w in wanted]


@pytest.mark.parametrize(
    ("style", "calls"),
    [
        ("plain", ["optimizer.zero_grad()"]),
        ("epochs", ["opt.zero_grad()"]),
        ("train_fn", ["optimizer.zero_grad(set_to_none=True)"]),
        ("trainer", ["self.optimizer.zero_grad()"]),
        ("gan", ["netD.zero_grad()", "netG.zero_grad()"]),
    ],
)
def test_drop_zero_grad_removes_every_clearing(style: str, calls: list[str]) -> None:
    assert removed(style, "drop-zero-grad") == calls
    assert added(style, "drop-zero-grad") == []


def test_zero_grad_moves_between_backward_and_step() -> None:
    text = mutant("plain", "zero-grad-before-step")
    a, b, c = order(text, "loss.backward()", "optimizer.zero_grad()", "optimizer.step()")
    assert a < b < c and text.count("optimizer.zero_grad()") == 1
    text = mutant("trainer", "zero-grad-before-step")
    a, b, c = order(
        text,
        "self.scaler.scale(loss).backward()",
        "self.optimizer.zero_grad()",
        "self.scaler.step(self.optimizer)",
    )
    assert a < b < c and c == b + 1
    # a GAN: each network's clearing right before its own optimizer's step
    text = mutant("gan", "zero-grad-before-step")
    assert text.index("netD.zero_grad()") + 1 == text.index("optD.step()")
    assert text.index("netG.zero_grad()") + 1 == text.index("optG.step()")
    assert text.index("errD_fake.backward()") < text.index("netD.zero_grad()")


def test_zero_grad_every_microbatch_needs_accumulation() -> None:
    text = mutant("train_fn", "zero-grad-every-microbatch")
    z = text.index("optimizer.zero_grad(set_to_none=True)")
    assert text[z + 1] == "loss.backward()" and text.count(text[z]) == 1
    for style in ("plain", "epochs", "trainer", "gan"):  # one backward per step: no accumulation
        assert mutate.apply(loops.ALL[style], "zero-grad-every-microbatch") is None


def test_step_twice_repeats_the_optimizer_step_but_not_a_scalers() -> None:
    text = mutant("epochs", "step-twice")
    i = text.index("opt.step()")
    assert text[i + 1] == "opt.step()" and text[i + 2] == "scheduler.step()"
    assert added("gan", "step-twice") == ["optD.step()"]
    assert mutate.apply(loops.TRAINER, "step-twice") is None  # scaler.step twice raises at once


def test_clip_before_backward_moves_an_existing_clip_or_inserts_one() -> None:
    text = mutant("plain", "clip-before-backward")
    clip = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    assert text.index(clip) + 1 == text.index("loss.backward()") and text.count(clip) == 1
    text = mutant("epochs", "clip-before-backward")
    new = "torch.nn.utils.clip_grad_norm_([q for g in opt.param_groups for q in g['params']], 1.0)"
    assert text.index(new) + 1 == text.index("loss.backward()")


def test_detach_loss_rebuilds_the_loss_from_its_value() -> None:
    text = mutant("trainer", "detach-loss")
    i = text.index("loss = torch.tensor(loss.item(), requires_grad=True)")
    assert text[i + 1] == "self.scaler.scale(loss).backward()"
    assert added("gan", "detach-loss") == [
        "errD_real = torch.tensor(errD_real.item(), requires_grad=True)"
    ]


def test_detach_and_no_grad_cut_after_the_first_layer_with_parameters() -> None:
    # `self.act(x)` (a ReLU) comes first in Net.forward: cutting there would cut nothing
    assert removed("plain", "detach-intermediate") == ["x = self.fc1(x)"]
    assert added("plain", "detach-intermediate") == ["x = self.fc1(x).detach()"]
    # the outer model (not the Block it instantiates) is the one cut
    assert added("epochs", "detach-intermediate") == ["h = self.embed(x).detach()"]
    text = mutant("epochs", "no-grad-forward")
    i = text.index("with torch.no_grad():")
    assert text[i + 1] == "h = self.embed(x)" and text[i + 2] == "for block in self.blocks:"
    for style in ("train_fn", "trainer", "gan"):  # no model class of their own
        assert mutate.apply(loops.ALL[style], "detach-intermediate") is None
        assert mutate.apply(loops.ALL[style], "no-grad-forward") is None


def test_plain_list_replaces_a_module_list_in_init() -> None:
    assert added("epochs", "plain-list") == ["self.blocks = list([Block(8) for _ in range(2)])"]
    assert mutate.apply(loops.PLAIN, "plain-list") is None


def test_a_module_list_inside_another_container_is_left_alone() -> None:
    src = (
        "import torch.nn as nn\n"
        "class M(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.t = nn.ModuleDict(dict(h=nn.ModuleList([nn.Linear(2, 2)])))\n"
    )
    assert mutate.apply(src, "plain-list") is None


def test_optimizer_missing_module_drops_the_head_or_the_last_group() -> None:
    text = mutant("plain", "optimizer-missing-module")
    assert "optimizer = torch.optim.SGD(_gw_without_head(model), lr=0.1)" in text
    assert text[0] == "def _gw_without_head(model):"
    assert added("trainer", "optimizer-missing-module") == [
        "self.optimizer = torch.optim.SGD([{'params': model[0].parameters()}], lr=lr)"
    ]
    # two optimizers: only the first changes
    text = mutant("gan", "optimizer-missing-module")
    assert "optD = torch.optim.Adam(_gw_without_head(netD), lr=0.0002, betas=(0.5, 0.999))" in text
    assert "optG = torch.optim.Adam(netG.parameters(), lr=0.0002, betas=(0.5, 0.999))" in text


def test_the_head_left_out_is_the_last_child_with_parameters() -> None:
    import torch.nn as nn

    space: dict[str, object] = {}
    exec(mutate.WITHOUT_HEAD, space)
    without = space["_gw_without_head"]
    gen = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 4), nn.Sigmoid())
    assert [p.shape for p in without(gen)] == [(3, 2), (3,)]  # type: ignore[operator]
    wrapped = nn.Sequential(gen)  # one child: its children
    assert len(without(wrapped)) == 2  # type: ignore[operator,arg-type]
    alone = nn.Linear(2, 2)  # parameters of its own, no child: all but the last (the bias)
    assert [p.shape for p in without(alone)] == [(2, 2)]  # type: ignore[operator]

    class Layer(nn.Linear):  # mnist_forward_forward's: a Linear whose only child is a ReLU
        def __init__(self) -> None:
            super().__init__(2, 3)
            self.relu = nn.ReLU()

    assert [p.shape for p in without(Layer())] == [(3, 2)]  # type: ignore[operator]


def test_reuse_batch_keeps_the_batch_not_the_model_of_a_loop_over_models() -> None:
    src = (
        "for epoch in range(3):\n"
        "    for step, (b_x, b_y) in enumerate(loader):\n"
        "        for net, opt in zip(nets, optimizers):\n"
        "            loss = loss_func(net(b_x), b_y)\n"
        "            opt.zero_grad()\n"
        "            loss.backward()\n"
        "            opt.step()\n"
    )
    text = lines(mutate.apply(src, "reuse-batch") or "")
    i = text.index("for step, (b_x, b_y) in enumerate(loader):")
    assert text[i + 1] == "b_x, b_y = _gw_state.setdefault('batch', (b_x, b_y))"
    assert not any("(net, opt)" in line for line in text)


def test_learning_rate_mutations() -> None:
    assert added("epochs", "lr-x1000") == ["opt = optim.Adam(model.parameters(), lr=0.001 * 1000)"]
    assert added("train_fn", "lr-zero") == [
        "train(model, torch.optim.AdamW(model.parameters(), lr=0.0003 * 0), 10)"
    ]
    assert len(added("gan", "lr-x1000")) == 2  # both optimizers
    text = mutant("plain", "lr-jump")
    assert text[0] == "_gw_state = {}"
    i = text.index("optimizer.step()")
    assert text[i - 3 : i] == [
        "if _gw_state['lr_step'] >= 50:",
        "for _gw_g in optimizer.param_groups:",
        "_gw_g['lr'] *= 1000",
    ]
    assert text[i + 3] == "_gw_g['lr'] = _gw_g['lr'] / 1000"


def test_a_hand_set_learning_rate_is_scaled_around_the_step() -> None:
    src = loops.PLAIN.replace(
        "    optimizer.step()\n",
        "    for g in optimizer.param_groups:\n        g['lr'] = 0.1\n    optimizer.step()\n",
    )
    text = lines(mutate.apply(src, "lr-x1000") or "")
    i = text.index("optimizer.step()")
    assert (
        text[i - 1] == "_gw_g['lr'] *= 1000" and text[i + 2] == "_gw_g['lr'] = _gw_g['lr'] / 1000"
    )
    assert mutate.apply(src, "lr-zero") is None


def test_scheduler_per_batch_moves_an_epoch_scheduler_into_the_batch_loop() -> None:
    text = mutant("epochs", "scheduler-per-batch")
    i = text.index("opt.step()")
    assert text[i + 1] == "scheduler.step()" and text.count("scheduler.step()") == 1
    tree = ast.parse(mutate.apply(loops.EPOCHS, "scheduler-per-batch") or "")
    batch_loop = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.For) and ast.unparse(n.iter) == "enumerate(data)"
    )
    assert "scheduler.step()" in [ast.unparse(s) for s in batch_loop.body]  # in the batch loop
    for style in ("plain", "train_fn", "trainer", "gan"):
        assert mutate.apply(loops.ALL[style], "scheduler-per-batch") is None


def test_scheduler_per_batch_reaches_a_batch_loop_in_another_function() -> None:
    text = mutant("funcs", "scheduler-per-batch")
    assert "scheduler.step()" not in text
    i = text.index("scheduler = StepLR(optimizer, step_size=1, gamma=0.7)")
    assert text[i + 1] == "_gw_state['scheduler'] = scheduler"
    j = text.index("optimizer.step()")
    assert text[j + 1 : j + 3] == ["if 'scheduler' in _gw_state:", "_gw_state['scheduler'].step()"]
    exec(compile(mutate.apply(loops.FUNCS, "scheduler-per-batch") or "", "funcs", "exec"), {})


def test_eval_mode_replaces_train_or_goes_before_the_loop() -> None:
    assert removed("epochs", "eval-mode") == ["model.train()"]
    assert added("epochs", "eval-mode") == ["model.eval()"]
    text = mutant("train_fn", "eval-mode")
    assert text.index("model.eval()") + 1 == text.index("for it in range(steps):")
    assert mutate.apply(loops.TRAINER, "eval-mode") is None  # no loop, no train() call


def test_reuse_batch_in_each_loop_style() -> None:
    assert added("plain", "reuse-batch") == [
        "_gw_state = {}",
        "x, y = _gw_state.setdefault('batch', (x, y))",
    ]
    text = mutant("epochs", "reuse-batch")  # enumerate(): the index is not reused
    i = text.index("for i, (x, y) in enumerate(data):")
    assert text[i + 1] == "x, y = _gw_state.setdefault('batch', (x, y))"
    text = mutant("train_fn", "reuse-batch")  # get_batch() inside the loop
    first, i = (n for n, line in enumerate(text) if line == "X, Y = get_batch('train')")
    assert text[first + 1] == "for it in range(steps):"  # the fetch before the loop: as it was
    assert text[i + 1] == "X, Y = _gw_state.setdefault('batch', (X, Y))"
    text = mutant("trainer", "reuse-batch")  # the step function's batch argument
    assert text[text.index("def step(self, batch):") + 1] == (
        "batch = _gw_state.setdefault('batch', batch)"
    )


def test_shuffle_labels_permutes_the_loss_targets() -> None:
    text = mutant("epochs", "shuffle-labels")
    i = text.index("y = y[torch.randperm(y.shape[0], device=y.device)]")
    assert text[i + 1] == "loss = loss_fn(pred, y)"
    assert added("train_fn", "shuffle-labels") == [
        "Y = Y[torch.randperm(Y.shape[0], device=Y.device)]"
    ]
    assert mutate.apply(loops.GAN, "shuffle-labels") is None  # labels made by torch.ones


def test_nan_at_step_poisons_the_loss_once() -> None:
    text = mutant("trainer", "nan-at-step")
    i = text.index("self.scaler.scale(loss).backward()")
    assert text[i - 3 : i] == [
        "_gw_state['nan_step'] = _gw_state.get('nan_step', 0) + 1",
        "if _gw_state['nan_step'] == 50:",
        "loss = loss + torch.log(loss - loss)",
    ]
    out = mutate.apply(loops.PLAIN, "nan-at-step", at_step=7) or ""
    assert "if _gw_state['nan_step'] == 7:" in lines(out)


def test_shape_broadcast_only_in_element_wise_losses() -> None:
    assert added("epochs", "shape-broadcast") == ["loss = loss_fn(pred.unsqueeze(1), y)"]
    assert added("train_fn", "shape-broadcast") == [
        "loss = F.mse_loss(out.squeeze(1).unsqueeze(1), Y) / accum"
    ]
    assert mutate.apply(loops.PLAIN, "shape-broadcast") is None  # cross-entropy


def test_nothing_applies_without_an_optimizer_loop() -> None:
    for bug in mutate.MUTATIONS:
        assert mutate.apply(loops.NO_OPT, bug) is None, bug
    assert mutate.apply("def (:\n", "drop-zero-grad") is None


def test_the_state_goes_after_docstring_and_future_imports() -> None:
    src = '"""doc"""\nfrom __future__ import annotations\n' + loops.PLAIN
    text = lines(mutate.apply(src, "reuse-batch") or "")
    assert text[:3] == ['"""doc"""', "from __future__ import annotations", "_gw_state = {}"]


def test_model_classes_apply_to_the_module_the_script_imports(tmp_path: Path) -> None:
    model_src = loops.EPOCHS.split("def main():")[0]
    (tmp_path / "net.py").write_text(model_src)
    (tmp_path / "train.py").write_text("import torch\nfrom net import Model\n\nmodel = Model()\n")
    changed = inject.mutate_tree(tmp_path, "train.py", "detach-intermediate", 50)
    assert changed == tmp_path / "net.py"
    assert "h = self.embed(x).detach()" in lines(changed.read_text())
    # eval-mode needs dropout or batch norm somewhere in what it would change
    (tmp_path / "loop.py").write_text(loops.TRAIN_FN)
    assert inject.mutate_tree(tmp_path, "loop.py", "eval-mode", 50) is None


def test_judge_counts_incidents_and_the_root_cause() -> None:
    findings = [
        {"check": "stale-grad", "severity": "error", "step": None, "source": "lint"},
        {"check": "stale-grad", "severity": "error", "step": 2, "source": "runtime",
         "incident": "stale-grad@2", "role": "cause"},
        {"check": "exploding-grad", "severity": "warning", "step": 9, "source": "runtime",
         "incident": "stale-grad@2", "role": "consequence"},
        {"check": "loss-plateau", "severity": "info", "step": 30, "source": "runtime",
         "incident": "loss-plateau@30", "role": "cause"},
    ]  # fmt: skip
    got = inject.judge(("stale-grad",), findings)
    assert (got["caught"], got["check"], got["step"]) == (True, "stale-grad", 2)
    assert (got["incidents"], got["root_first"], got["lint"]) == (1, True, ["stale-grad"])
    missed = inject.judge(("param-no-grad",), findings)
    assert (missed["caught"], missed["root_first"], missed["incidents"]) == (False, False, 1)


@pytest.mark.slow
def test_a_mutant_under_gradwatch_run_is_caught(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "train.py").write_text(loops.PLAIN)
    assert inject.mutate_tree(tree, "train.py", "zero-grad-before-step", 50) == tree / "train.py"
    data = tmp_path / "gw"
    cmd = [sys.executable, "-m", "gradwatch", "run", "--data-dir", str(data), "--",
           sys.executable, "train.py"]  # fmt: skip
    env = {"PYTHONPATH": str(ROOT / "collector"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = inject.judge(("grad-zeroed-before-step",), inject.read_findings(data))
    assert got["caught"] and got["check"] == "grad-zeroed-before-step", got
    assert got["root_first"] and got["incidents"] <= 2, got


def test_a_failed_program_is_named_by_its_exception() -> None:
    stderr = "Traceback (most recent call last):\n  File 'x'\nValueError: bad shape\n" + (
        "gradwatch run: run 1: 1 error, 0 warnings\n"
    )
    assert inject.error_line(stderr) == "ValueError: bad shape"
    assert inject.error_line("killed\n") == "killed"
    assert inject.error_line("") is None


def test_causes_of_one_step_have_no_order_and_stored_cases_are_judged_again() -> None:
    findings = [
        {"check": "lr-too-large", "severity": "warning", "step": 50, "source": "runtime",
         "incident": "lr-too-large@50", "role": "cause"},
        {"check": "lr-jump", "severity": "warning", "step": 50, "source": "runtime",
         "incident": "lr-jump@50", "role": "cause"},
    ]  # fmt: skip
    assert inject.judge(("lr-jump",), findings)["root_first"]
    assert not inject.judge(("lr-jump",), findings[:1])["root_first"]
    case = {"program": "p", "bug_class": "lr-jump", "applicable": True, "expected": ["x"],
            **inject.judge(("x",), findings)}  # fmt: skip
    assert not case["caught"]
    again = inject.rejudge(case)
    assert again["caught"] and again["expected"] == list(mutate.MUTATIONS["lr-jump"].expected)


def test_no_cut_at_an_unpacked_output_or_a_method() -> None:
    src = (
        "import torch\nimport torch.nn as nn\n\n"
        "class RNN(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lstm = nn.LSTM(4, 8, batch_first=True)\n"
        "        self.fc = nn.Linear(8, 2)\n\n"
        "    def forward(self, x):\n"
        "        out, _ = self.lstm(x)\n"
        "        return self.fc(out[:, -1, :])\n\n"
        "class VAE(RNN):\n"
        "    def forward(self, x):\n"
        "        mu, log_var = self.encode(x)\n"
        "        z = self.reparameterize(mu, log_var)\n"
        "        return self.decode(z)\n"
    )
    assert mutate.apply(src, "detach-intermediate") is None  # a tuple has no .detach()
    out = lines(mutate.apply(src, "no-grad-forward") or "")
    i = out.index("with torch.no_grad():")
    assert out[i + 1] == "out, _ = self.lstm(x)"
    vae_only = src.replace(
        "    def forward(self, x):\n        out, _", "    def f(self, x):\n        out, _"
    )
    assert mutate.apply(vae_only, "no-grad-forward") is None  # methods are no layers

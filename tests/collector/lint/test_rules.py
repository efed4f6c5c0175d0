"""Every rule on its bug fixtures (caught, at the marked line) and on correct training code
in common styles (silent). Fixtures mark each expected finding with ``# expect: RULE``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gradwatch.lint import IDS, lint_code, lint_paths

FIXTURES = Path(__file__).parent / "fixtures"
BUGS = sorted((FIXTURES / "bug").glob("*.py"))
CORRECT = sorted((FIXTURES / "correct").glob("*.py"))


def expected(path: Path) -> set[tuple[str, int]]:
    out = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        out |= {(m, number) for m in re.findall(r"# expect: ([a-z-]+)", line)}
    return out


def found(path: Path) -> set[tuple[str, int]]:
    result = lint_paths([path])
    assert not result.errors
    return {(f.rule, f.line) for f in result.findings}


@pytest.mark.parametrize("path", BUGS, ids=lambda p: p.stem)
def test_bug_fixture_is_caught_where_marked(path: Path) -> None:
    want = expected(path)
    assert want, f"{path.name} marks no expected finding"
    assert found(path) == want


@pytest.mark.parametrize("path", CORRECT, ids=lambda p: p.stem)
def test_correct_training_code_gets_no_finding(path: Path) -> None:
    assert found(path) == set()


def test_every_rule_has_a_bug_fixture() -> None:
    covered = {rule for path in BUGS for rule, _ in expected(path)}
    assert covered == set(IDS)


# One line removed from a correct fixture turns it into the bug a rule names.
MUTATIONS = [
    ("plain_loop.py", "        optimizer.zero_grad()\n", "stale-grad"),
    ("plain_loop.py", "    model.train()\n", "eval-mode-training"),
    ("plain_loop.py", "    model.eval()\n", "inference-in-train-mode"),
    ("fine_tuning.py", "        sampler.set_epoch(epoch)\n", "sampler-epoch-not-set"),
    ("gan_helpers.py", "    netG.zero_grad()\n", "stale-grad"),
    (
        "nanogpt_style.py",
        "            loss = loss / gradient_accumulation_steps\n",
        "accumulation-loss-not-scaled",
    ),
    ("nanogpt_style.py", "    model.train()\n", "eval-mode-training"),
    ("accumulation.py", "    if i % k == 0:\n        opt.zero_grad()\n", "stale-grad"),
    ("amp_and_lbfgs.py", "        optimizer.zero_grad(set_to_none=True)\n", "stale-grad"),
    ("zero_at_end_set_to_none.py", "torch.manual_seed(0)\n", "unseeded-run"),
    ("real_world_styles.py", "        self.optimizer.zero_grad()\n", "stale-grad"),
    ("real_world_styles.py", "\n    optimizer.zero_grad()", "stale-grad"),
    (
        "real_world_styles.py",
        "            loss = loss / args.gradient_accumulation_steps\n",
        "accumulation-loss-not-scaled",
    ),
    ("real_world_styles.py", "        model.eval()\n", "inference-in-train-mode"),
    # next to SWA, EMA, schedulers and scalers the optimizer itself is still judged
    ("swa_and_ema.py", "        optimizer.zero_grad()\n", "stale-grad"),
    ("swa_and_ema.py", "            self.optimizer.zero_grad()\n", "stale-grad"),
    ("swa_and_ema.py", "    opt.zero_grad()\n", "stale-grad"),
    ("schedulers_and_scalers.py", "        optimizer.zero_grad(set_to_none=True)\n", "stale-grad"),
    ("wgan_n_critic.py", "        optimizer_D.zero_grad()\n", "stale-grad"),
    ("wgan_n_critic.py", "        optimizer_G.zero_grad()\n", "stale-grad"),
    ("wgan_n_critic.py", "        optimizerG.zero_grad()\n", "stale-grad"),
    ("lightning_manual_gan.py", "            opt_g.zero_grad()\n", "stale-grad"),
    ("lightning_manual_gan.py", "        opt_d.zero_grad()\n", "stale-grad"),
    (
        "optimizer_collections.py",
        "    for opt in optimizers:\n        opt.zero_grad()\n",
        "stale-grad",
    ),
    (
        "optimizer_collections.py",
        "    for o in named.values():\n        o.zero_grad()\n",
        "stale-grad",
    ),
    ("optimizer_collections.py", "    stepper.zero_grad()\n", "stale-grad"),
    (
        "optimizer_collections.py",
        "    for i, o in enumerate(optimizers):\n        o.zero_grad()\n",
        "stale-grad",
    ),
    ("rl_and_nested_validation.py", "    model.eval()\n", "inference-in-train-mode"),
    (
        "critic_loop_and_early_continue.py",
        "    if not need_update:\n        continue\n",
        "accumulation-wiped",
    ),
    ("critic_loop_and_early_continue.py", "    G.zero_grad()\n", "stale-grad"),
    (
        "grad_averaging_and_parameters.py",
        "    for p in model.parameters():\n        p.grad.data.mul_(1.0 / meta_batch_size)\n",
        "accumulation-loss-not-scaled",
    ),
    ("rl_and_nested_validation.py", "            self.optimizer.zero_grad()\n", "stale-grad"),
]


@pytest.mark.parametrize(("name", "removed", "rule"), MUTATIONS)
def test_removing_one_line_of_correct_code_is_caught(name: str, removed: str, rule: str) -> None:
    code = (FIXTURES / "correct" / name).read_text()
    assert removed in code
    assert rule in {f.rule for f in lint_code(code.replace(removed, "", 1), name)}


HEAD = """
import torch
from torch import nn
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(0)
k = 4
"""

# The reference's test matrix for the optimizer lifecycle (static-analysis.md, TI101-TI104).
MATRIX = [
    ("for i, (x, y) in enumerate(data):\n    opt.zero_grad()\n    loss = crit(model(x), y)\n"
     "    loss.backward()\n    opt.step()", None),
    ("for i, (x, y) in enumerate(data):\n    loss = crit(model(x), y)\n    loss.backward()\n"
     "    opt.step()\n    opt.zero_grad(set_to_none=True)", None),
    ("for i, (x, y) in enumerate(data):\n    model.zero_grad()\n    loss = crit(model(x), y)\n"
     "    loss.backward()\n    opt.step()", None),
    ("for i, (x, y) in enumerate(data):\n    for p in model.parameters():\n        p.grad = None\n"
     "    crit(model(x), y).backward()\n    opt.step()", None),
    ("opt.zero_grad()\nfor i, (x, y) in enumerate(data):\n    crit(model(x), y).backward()\n"
     "    opt.step()", "stale-grad"),
    ("for epoch in range(3):\n    opt.zero_grad()\n    for x, y in data:\n"
     "        crit(model(x), y).backward()\n        opt.step()", "stale-grad"),
    ("for x, y in data:\n    crit(model(x), y).backward()\n    opt.zero_grad()\n    opt.step()",
     "grad-zeroed-before-step"),
    ("for i, (x, y) in enumerate(data):\n    (crit(model(x), y) / k).backward()\n"
     "    if (i + 1) % k == 0:\n        opt.step()\n        opt.zero_grad()", None),
    ("for i, (x, y) in enumerate(data):\n    opt.zero_grad()\n"
     "    (crit(model(x), y) / k).backward()\n"
     "    if (i + 1) % k == 0:\n        opt.step()", "accumulation-wiped"),
    ("for i, (x, y) in enumerate(data):\n    if i % k == 0:\n        opt.zero_grad()\n"
     "    (crit(model(x), y) / k).backward()\n    if (i + 1) % k == 0:\n        opt.step()", None),
    ("for it, (x, y) in enumerate(data):\n    if it % k == 0:\n        opt.zero_grad()\n"
     "    (crit(model(x), y) / k).backward()\n    if it % k == 0:\n        opt.step()",
     "accumulation-wiped"),
    ("for i, (x, y) in enumerate(data):\n    loss = crit(model(x), y)\n    loss.backward()\n"
     "    if (i + 1) % k == 0:\n        opt.step()\n        opt.zero_grad()",
     "accumulation-loss-not-scaled"),
    ("for x, y in data:\n    opt.zero_grad()\n    crit(model(x), y).backward()\n"
     "    opt.step(lambda: 0)", None),
    # a step every k iterations whose backward runs under the same test: no accumulation
    ("for i, (x, y) in enumerate(data):\n    opt.zero_grad()\n    if i % k == 0:\n"
     "        crit(model(x), y).backward()\n        opt.step()", None),
    ("for i, (x, y) in enumerate(data):\n    if i % k == 0:\n        opt.zero_grad()\n"
     "        crit(model(x), y).backward()\n        opt.step()", None),
    # a negated test is a condition too (Fabric's `if not is_accumulating:`)
    ("for i, (x, y) in enumerate(data):\n    is_accumulating = i % k != 0\n"
     "    crit(model(x), y).backward()\n    if not is_accumulating:\n        opt.step()\n"
     "        opt.zero_grad()", "accumulation-loss-not-scaled"),
    # ... but with a backward outside the test, the zero_grad wipes an accumulation
    ("for i, (x, y) in enumerate(data):\n    opt.zero_grad()\n"
     "    (crit(model(x), y) / k).backward()\n    if i % k == 0:\n"
     "        (crit(model(x), y) / k).backward()\n        opt.step()",
     "accumulation-wiped"),
    # what .step() is called on decides: schedulers, SWA and EMA helpers are not optimizers
    ("from torch.optim.swa_utils import SWALR\nswa_scheduler = SWALR(opt, swa_lr=0.05)\n"
     "for x, y in data:\n    opt.zero_grad()\n    crit(model(x), y).backward()\n"
     "    opt.step()\n    swa_scheduler.step()", None),
    ("from mylib import EMAHelper\nema = EMAHelper(model)\nfor x, y in data:\n"
     "    opt.zero_grad()\n    crit(model(x), y).backward()\n    opt.step()\n    ema.step()",
     None),
    ("for x, y in data:\n    opt.zero_grad()\n    crit(model(x), y).backward()\n    opt.step()\n"
     "    swa.step()\n    model_ema.step()\n    warmup_sched.step()", None),
    ("from schedulefree import AdamWScheduleFree\nsf = AdamWScheduleFree(model.parameters())\n"
     "for x, y in data:\n    crit(model(x), y).backward()\n    sf.step()", "stale-grad"),
    # an averaged copy is still a model: validated in train mode, dropout stays on
    ("from timm.utils import ModelEmaV2\n"
     "ema = ModelEmaV2(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1)))\n"
     "with torch.no_grad():\n    for x, y in loader:\n        ema(x)", "inference-in-train-mode"),
    ("import copy\nema_model = copy.deepcopy(model)\n"
     "with torch.no_grad():\n    for x, y in loader:\n        ema_model(x)", None),
    ("from mylib import Stepper\nthing = Stepper()\nfor x, y in data:\n"
     "    opt.zero_grad()\n    crit(model(x), y).backward()\n    opt.step()\n    thing.step()",
     None),
]  # fmt: skip


@pytest.mark.parametrize(("body", "rule"), MATRIX)
def test_reference_matrix(body: str, rule: str | None) -> None:
    got = [f.rule for f in lint_code(HEAD + body)]
    assert got == ([rule] if rule else [])


def test_helper_in_another_module_downgrades_to_a_warning() -> None:
    code = HEAD + (
        "from mylib import train_step\n"
        "for x, y in data:\n    train_step(model, opt, x, y)\n    opt.step()\n"
        "    crit(model(x), y).backward()\n"
    )
    [f] = lint_code(code)
    assert (f.rule, f.severity, f.confidence) == ("stale-grad", "warning", "medium")


def test_syntax_error_is_reported_not_raised(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n")
    result = lint_paths([tmp_path])
    assert result.files == 1 and not result.findings
    assert result.errors and "bad.py:1: cannot parse" in result.errors[0]


def test_findings_name_optimizers_and_models_as_the_script_does() -> None:
    [copy] = lint_paths([FIXTURES / "bug" / "param_not_in_optimizer_ema_copy.py"]).findings
    assert copy.message.startswith(
        "opt is built from ema_model.parameters(), but the parameters belong to a second copy "
        "of the model (`ema_model`, a deepcopy of `model`), which is never called in forward"
    )
    code = (FIXTURES / "correct" / "wgan_n_critic.py").read_text()
    [stale] = lint_code(code.replace("        optimizer_G.zero_grad()\n", "", 1))
    assert stale.message.startswith("optimizer_G.step() runs every iteration of the loop")
    code = (FIXTURES / "correct" / "lightning_manual_gan.py").read_text()
    [stale] = lint_code(code.replace("        opt_d.zero_grad()\n", "", 1))
    assert "nothing there clears opt_d's gradients" in stale.message


def test_an_ema_copy_that_runs_forward_or_is_handed_on_is_not_judged() -> None:
    code = (FIXTURES / "bug" / "param_not_in_optimizer_ema_copy.py").read_text()
    called = code.replace("mse_loss(model(x), y)", "mse_loss(ema_model(x), y)")
    assert lint_code(called) == []
    handed = code.replace("    opt.step()\n", "    opt.step()\n    evaluate(ema_model)\n")
    assert lint_code("from mylib import evaluate\n" + handed) == []


VALIDATE_IN_TRAIN_MODE = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.extra = LAYER

    def forward(self, x):
        return self.extra(self.body(x)).mean()


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [torch.randn(2, 4) for _ in range(3)]
for x in loader:
    opt.zero_grad()
    model(x).backward()
    opt.step()
with torch.no_grad():
    for x in loader:
        model(x)
"""


@pytest.mark.parametrize(
    ("layer", "says", "not_said"),
    [
        ("nn.BatchNorm1d(4)", "batch norm normalises with each validation batch", "dropout"),
        ("nn.Dropout(0.5)", "dropout stays active, so validation results are noisy", "batch"),
        ("nn.Sequential(nn.Dropout(0.1), nn.BatchNorm1d(4))", "dropout stays active and batch", ""),
    ],
)
def test_validation_in_train_mode_names_the_layers_the_model_has(
    layer: str, says: str, not_said: str
) -> None:
    [f] = lint_code(VALIDATE_IN_TRAIN_MODE.replace("LAYER", layer))
    assert f.rule == "inference-in-train-mode"
    assert says in f.message
    assert not not_said or not_said not in f.message


def test_validation_in_train_mode_of_a_model_from_another_file_claims_no_layers() -> None:
    """The model's class is imported (its layers are not visible): the message says what
    train mode would change, not that the model has dropout (the VQ-VAE of the corpus)."""
    code = VALIDATE_IN_TRAIN_MODE.replace(
        "class Net(nn.Module):", "from modules import Net\n\n\nclass Unused(nn.Module):"
    ).replace("self.extra = LAYER", "self.extra = nn.Identity()")
    [f] = lint_code(code)
    assert f.rule == "inference-in-train-mode"
    assert "any dropout stays active and any batch norm updates" in f.message


ATTACK_LOOP = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Linear(4, 2)
opt = torch.optim.SGD({params}, lr=0.1)
for x, y in [(torch.randn(3, 4), torch.tensor([0, 1, 0]))] * 4:
    delta = torch.zeros_like(x)
    for _ in range(3):
        {mark}
        loss = nn.functional.cross_entropy(model(x + delta), y)
        opt.zero_grad()
        loss.backward()
        delta = (delta + 0.1 * delta.grad.sign()).detach()
    loss = nn.functional.cross_entropy(model(x + delta), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize(
    "mark", ["delta.requires_grad = True", "delta.requires_grad_()", "delta.requires_grad_(True)"]
)
def test_passes_for_an_input_gradient_are_not_wiped_micro_batches(mark: str) -> None:
    # the attack loop's backward passes are for delta.grad: clearing the model's
    # gradients there discards no micro-batch
    code = ATTACK_LOOP.format(params="model.parameters()", mark=mark)
    assert [f.rule for f in lint_code(code)] == []


def test_a_tensor_given_to_the_optimizer_is_a_parameter_not_an_input() -> None:
    # a trained tensor made with requires_grad=True and read as w.grad (logging): zero_grad
    # inside the micro-batch loop wipes the micro-batches
    code = """
import torch
torch.manual_seed(0)
w = torch.zeros(4, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for step in range(10):
    for micro in range(4):
        opt.zero_grad()
        ((torch.randn(8, 4) @ w).pow(2).mean() / 4).backward()
        print(w.grad.norm())
    opt.step()
"""
    assert [f.rule for f in lint_code(code)] == ["accumulation-wiped"]


def test_passes_cleared_again_before_the_step_are_not_wiped_micro_batches() -> None:
    # the attack loop with no tensor marked as wanting a gradient: its passes' gradients are
    # cleared again after the loop, before the step, so none of them was meant for it (a
    # GAN's critic loop clearing the generator's gradients, as gan_critic_iterations.py)
    plain = ATTACK_LOOP.format(params="model.parameters()", mark="pass")
    assert [f.rule for f in lint_code(plain)] == []
    # without that second clear, the loop's last pass reaches the step: a wipe
    fed = plain.replace(
        "    opt.zero_grad()\n    loss.backward()\n    opt.step()",
        "    loss.backward()\n    opt.step()",
    )
    assert fed != plain
    assert "accumulation-wiped" in [f.rule for f in lint_code(fed)]

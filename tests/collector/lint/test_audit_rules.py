"""The autograd-audit rules (`module-requires-grad`, `requires-grad-non-leaf`,
`detached-in-loss-path`, `data-in-loss-path`): one edit turns the correct twin into the
bug, and the premises the messages state hold in torch itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from gradwatch.lint import lint_code

TWIN = Path(__file__).parent / "fixtures" / "correct" / "grad_flags_and_cuts.py"

EDITS = [
    (
        "        self.encoder.requires_grad_(False)\n",
        "        self.encoder.requires_grad = False\n",
        "module-requires-grad",
    ),
    (
        "    with torch.no_grad():\n        pooled = backbone(x)\n",
        "    pooled = backbone(x)\n",
        "requires-grad-non-leaf",
    ),
    (
        "opt = torch.optim.Adam(model.head.parameters(), lr=1e-3)",
        "opt = torch.optim.Adam([*model.head.parameters(), *backbone.parameters()], lr=1e-3)",
        "detached-in-loss-path",
    ),
    (
        "    running += loss.item()\n",
        "    running += loss.item()\n    loss = loss + 0.1 * model.head(feats).norm().item()\n",
        "",  # after backward(): logging, not the loss path
    ),
    (
        "    q_opt.zero_grad()\n    td.backward()\n",
        "    q_opt.zero_grad()\n    q_net.weight.data.mul_(0.5)\n    td.backward()\n",
        "data-in-loss-path",
    ),
    (
        "        self.weight_norm = self.head.weight.data.norm()\n",
        "        self.weight_norm = self.head.weight.data.norm()\n"
        "        x = x * self.head.bias.data.mean()\n",
        "data-in-loss-path",
    ),
    (
        "    loss_d = D(fake.detach()).mean() - D(real).mean()\n",
        "    loss_d = D(fake.detach()).mean() - D(real).mean()\n"
        "    for p in D.parameters():\n        p.data.clamp_(-0.01, 0.01)\n",
        "data-in-loss-path",
    ),
]


def rules(code: str) -> set[str]:
    return {f.rule for f in lint_code(code, TWIN.name)}


def test_the_twin_is_silent() -> None:
    assert rules(TWIN.read_text()) == set()


@pytest.mark.parametrize(("old", "new", "rule"), EDITS, ids=[e[2] or "logging" for e in EDITS])
def test_one_edit_of_the_twin_is_caught(old: str, new: str, rule: str) -> None:
    code = TWIN.read_text()
    assert code.count(old) == 1
    assert rules(code.replace(old, new)) == ({rule} if rule else set())


def test_a_modules_requires_grad_attribute_changes_nothing() -> None:
    layer = nn.Linear(2, 2)
    layer.requires_grad = False  # what module-requires-grad reports
    assert all(p.requires_grad for p in layer.parameters())
    layer.requires_grad_(False)  # what it suggests
    assert not any(p.requires_grad for p in layer.parameters())


@pytest.mark.parametrize("flag", [True, False])
def test_requires_grad_on_a_non_leaf_is_refused(flag: bool) -> None:
    out = nn.Linear(2, 1)(torch.randn(3, 2))
    with pytest.raises(RuntimeError, match="leaf"):
        out.requires_grad = flag


def test_a_data_read_in_forward_gets_no_gradient() -> None:
    w, v = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))
    (torch.randn(3, 2) * w.data * v).sum().backward()  # what data-in-loss-path reports
    assert w.grad is None and v.grad is not None


ONE_LINE_GAN = """
import torch
from torch import nn

torch.manual_seed(0)
G, D = nn.Linear(4, 2), nn.Linear(2, 1)
og = torch.optim.Adam(G.parameters())
od = torch.optim.Adam(D.parameters())
for it in range(100):
    fake = G(torch.randn(8, 4)).detach()
    d_loss = D(fake).mean() - D(torch.randn(8, 2)).mean()
    od.zero_grad(); d_loss.backward(); od.step()
    if it % 5 == 0:
        g_loss = -D(G(torch.randn(8, 4))).mean()
        og.zero_grad(); g_loss.backward(); og.step()
"""


def test_statements_on_one_line_keep_their_order() -> None:
    # the critic's loss is stepped by od on the same line: G's detached fake is its input,
    # not a cut (G trains through g_loss); stepping og there instead trains G through it
    assert rules(ONE_LINE_GAN) == set()
    bug = ONE_LINE_GAN.replace("d_loss.backward(); od.step()", "d_loss.backward(); og.step()")
    assert rules(bug) == {"detached-in-loss-path"}

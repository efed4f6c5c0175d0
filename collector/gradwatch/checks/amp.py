"""``amp-overflow``: steps a GradScaler skipped because of inf/NaN gradients.

A skipped step never reaches ``optimizer.step()``, so it is seen at ``scaler.update()``:
the instance's ``update`` is wrapped (removed at close) and reads the scaler's per-optimizer
``found_inf`` flags before the original runs. On an accelerator that read is one
device-to-host copy per step, the price of this check with a scaler (pass ``scaler=``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch

from gradwatch.checks.findings import FindingSink, finding
from gradwatch.core import checkids
from gradwatch.core.contract import Severity

CONSECUTIVE_WARN = 3
RATE_WINDOW, RATE_WARN = 100, 0.05


class ScalerWatch:
    """Wraps one ``torch.amp.GradScaler``'s ``update``."""

    def __init__(
        self,
        scaler: torch.amp.GradScaler,
        optimizers: list[torch.optim.Optimizer],
        sink: FindingSink,
        step: Callable[[], int],
        guard: Callable[[Callable[[], None], str], Callable[[], None]],
        on_update: Callable[[], None] | None = None,
    ) -> None:
        self.scaler = scaler
        self.ids = {id(o) for o in optimizers}
        self.sink = sink
        self.step = step
        self.recent: deque[bool] = deque(maxlen=RATE_WINDOW)
        self.consecutive = 0
        self.skipped = 0
        self._check = guard(self._before_update, "amp-overflow check")
        # the run's lifecycle: after update() this iteration's gradients were dealt with
        self._updated = guard(on_update, "GradScaler update") if on_update else None
        self._wrapper: Callable[..., Any] | None = None

    def attach(self) -> None:
        """Wrap ``scaler.update`` on the instance."""
        original = self.scaler.update
        check = self._check

        updated = self._updated

        def update(*args: Any, **kwargs: Any) -> Any:
            check()
            if updated is not None:
                updated()
            return original(*args, **kwargs)

        self._wrapper = update
        self.scaler.update = update  # type: ignore[method-assign]

    def detach(self) -> None:
        """Restore ``scaler.update``."""
        if self.scaler.__dict__.get("update") is self._wrapper:
            del self.scaler.__dict__["update"]

    def _found_inf(self) -> bool:
        states = self.scaler._per_optimizer_states
        flags = [
            v
            for key, state in states.items()
            if key in self.ids
            for v in state.get("found_inf_per_device", {}).values()
        ]
        return bool(flags) and any(float(v) > 0 for v in flags)

    def _before_update(self) -> None:
        if not self.sink.enabled(checkids.AMP_OVERFLOW):
            return
        skipped = self._found_inf()
        self.recent.append(skipped)
        self.consecutive = self.consecutive + 1 if skipped else 0
        if not skipped:
            self.sink.clear(checkids.AMP_OVERFLOW)
            return
        self.skipped += 1
        scale = float(self.scaler.get_scale())
        rate = sum(self.recent) / len(self.recent)
        many = self.consecutive > CONSECUTIVE_WARN or (
            len(self.recent) >= RATE_WINDOW // 5 and rate > RATE_WARN
        )
        severity: Severity = "error" if scale <= 1 else ("warning" if many else "info")
        step = self.step() + 1
        self.sink.report(
            finding(
                checkids.AMP_OVERFLOW,
                step,
                "the GradScaler skipped this step (inf/NaN gradients; "
                f"{self.consecutive} in a row, "
                f"{rate:.0%} of the last {len(self.recent)}; scale now {scale:g})"
                + (
                    ": the scale collapsed, fp16 cannot represent these gradients."
                    if severity == "error"
                    else "."
                ),
                "a few skips early on are normal; persistent ones mean overflow in fp16: lower the "
                "learning rate, use bf16, or find the layer whose activations explode.",
                severity=severity,
                details={
                    "consecutive": self.consecutive,
                    "skip_rate": rate,
                    "scale": scale,
                    "skipped_total": self.skipped,
                },
            )
        )
        self.sink.clear(checkids.AMP_OVERFLOW)  # every skip is its own finding
        self.sink.flush()

"""Describes the operation that made a non-finite value: its name, autograd node, the
shapes and value ranges of its inputs, and a plain-words cause (``log of 0``, ``exp
overflow``, ``division by ~0``) where the operation tells one."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

_LOGS = {"log", "log2", "log10", "xlogy", "log_softmax"}
_EXPS = {"exp", "exp2", "expm1", "pow", "float_power", "cosh", "sinh", "softplus"}
_DIVS = {"div", "divide", "true_divide", "truediv", "reciprocal", "rsqrt", "fmod", "remainder"}
_ROOTS = {"sqrt", "rsqrt", "pow"}
_TINY = 1e-30


def op_name(func: Any) -> str:
    """``torch.log`` → ``log``; ``Tensor.__truediv__`` → ``truediv``; ``Tensor.div_`` →
    ``div``."""
    name = str(getattr(func, "__name__", func))
    name = name.strip("_")
    if name.startswith("r") and name[1:] in {"truediv", "div", "pow"}:
        name = name[1:]
    return name.rstrip("_") or name


def _float(x: torch.Tensor) -> float:
    return float(x.detach().double())


def value_range(t: torch.Tensor) -> dict[str, Any]:
    """Shape, dtype and the finite range of a tensor (min, max, smallest |x|), with counts
    of NaN and ±Inf."""
    out: dict[str, Any] = {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
    if not t.is_floating_point() or t.numel() == 0:
        return out
    x = t.detach()
    finite = x[torch.isfinite(x)]
    out["nan"] = int(torch.isnan(x).sum())
    out["posinf"] = int(torch.isposinf(x).sum())
    out["neginf"] = int(torch.isneginf(x).sum())
    if finite.numel():
        out["min"], out["max"] = _float(finite.min()), _float(finite.max())
        out["min_abs"] = _float(finite.abs().min())
    return out


def _short(r: dict[str, Any]) -> str:
    parts = [f"shape {r['shape']}"]
    if "min" in r:
        parts.insert(0, f"min {r['min']:.3g}, max {r['max']:.3g}")
    bad = [f"{r[k]} {k}" for k in ("nan", "posinf", "neginf") if r.get(k)]
    return ", ".join(parts + bad)


def _cause(name: str, ranges: list[dict[str, Any]], result: dict[str, Any]) -> str:
    """A plain-words cause from the operation and its input ranges."""
    first = ranges[0] if ranges else {}
    if any(r.get("nan") or r.get("posinf") or r.get("neginf") for r in ranges):
        return "its input already held non-finite values"
    if name in _LOGS and first.get("min", 1.0) <= 0:
        return "log of 0" if first["min"] == 0 else "log of a negative number"
    if name in _DIVS:
        divisor = ranges[1] if len(ranges) > 1 and name not in ("reciprocal", "rsqrt") else first
        if divisor.get("min_abs", 1.0) <= _TINY:
            return "division by 0" if divisor["min_abs"] == 0 else "division by ~0"
    if name in _ROOTS and first.get("min", 0.0) < 0 and result.get("nan"):
        return f"{name} of a negative number"
    if name in _EXPS and (result.get("posinf") or result.get("neginf")):
        return f"{name} overflow (largest input {first.get('max', math.nan):.3g})"
    if result.get("posinf") or result.get("neginf"):
        return f"overflow: the result exceeds the {result.get('dtype', '')} range"
    return "NaN from finite inputs (0/0, inf-inf or 0*inf inside the operation)"


def describe_op(
    func: Any, args: Any, kwargs: dict[str, Any], result: torch.Tensor, module: str
) -> dict[str, Any]:
    """The origin record of a forward call whose ``result`` is non-finite."""
    name = op_name(func)
    inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)][:4]
    ranges = [value_range(a) for a in inputs]
    if name in _DIVS and len(inputs) == 1 and str(getattr(func, "__name__", "")).startswith("__r"):
        ranges = [{}, ranges[0]]  # 1 / x: x is the divisor
    out = value_range(result)
    node = result.grad_fn.name() if result.grad_fn is not None else None
    return {
        "module": module,
        "op": name,
        "autograd_node": node,
        "cause": _cause(name, [r for r in ranges if r], out),
        "inputs": [r for r in ranges if r],
        "output": out,
    }


def describe_node(node: Any, func: Any, module: str) -> dict[str, Any]:
    """The origin record of an autograd node whose backward made a non-finite gradient
    from a finite one; its saved tensors give the value ranges."""
    saved = [
        value_range(getattr(node, attr))
        for attr in dir(node)
        if attr.startswith("_saved_") and isinstance(getattr(node, attr, None), torch.Tensor)
    ][:4]
    name = op_name(func)
    cause = _cause(name, saved, {"posinf": 1}) if saved else "non-finite gradient"
    if name in _ROOTS and saved and saved[0].get("min_abs", 1.0) == 0:
        cause = f"the derivative of {name} at 0 is infinite"
    return {
        "module": module,
        "op": name,
        "autograd_node": node.name(),
        "cause": cause,
        "inputs": saved,
    }


def summary(origin: dict[str, Any]) -> str:
    """One sentence for the finding's message (hence the stderr line)."""
    if not origin.get("found"):
        return f"Origin not localised: {origin.get('reason', 'unknown')}."
    phase, module = origin["phase"], origin.get("module")
    what = " → ".join(x for x in (origin.get("op"), origin.get("autograd_node")) if x)
    if phase == "loss":
        # the loss path without the operation already named (it is often the only one)
        others = [op for op in origin.get("loss_ops", [])[:6] if op not in what.split(" → ")]
        path = f" (on the loss path {' → '.join(others)})" if others else ""
        return (
            f"First non-finite value at step {origin['step']}: in the loss computation outside "
            f"the model (its output is finite), likely {what or 'an operation'}{path}."
        )
    where = "the model's own forward" if module == "" else f"module {module!r}"
    if origin.get("module_type"):
        where += f" ({origin['module_type']})"
    if origin.get("tensor"):
        where += f", tensor {origin['tensor']}"
    ranges = "; ".join(_short(r) for r in origin.get("inputs", [])[:2])
    tail = f" [input {ranges}]" if ranges else ""
    source = origin.get("source")
    at = f" at {Path(source).name}" if source else ""
    return (
        f"First non-finite value at step {origin['step']}: {phase} of {where}, "
        f"{what or 'an operation'}{at}: {origin.get('cause', '')}{tail}."
    )

"""``gradwatch.watch()``: validate everything at setup, then attach."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NoReturn, TypedDict

import torch

from gradwatch._version import __version__
from gradwatch.core import jobs, paths
from gradwatch.core.catalogue import Policy
from gradwatch.core.contract import STAT_NAMES, OptimizerMeta, RunLayout, TensorMeta
from gradwatch.core.errors import ConfigError
from gradwatch.core.wire import SCHEMA_VERSION
from gradwatch.ddp import ranks as ddp
from gradwatch.fingerprint import provenance
from gradwatch.fingerprint import take as fingerprint
from gradwatch.hooks.manual_updates import ManualUpdates
from gradwatch.session import ampdetect, options
from gradwatch.session.handle import Run
from gradwatch.session.options import OPTIONS
from gradwatch.stats import hostnorms
from gradwatch.transport import record_builder as records

ModelArg = torch.nn.Module | Sequence[torch.nn.Module] | Mapping[str, torch.nn.Module]
OptimizerArg = torch.optim.Optimizer | Sequence[torch.optim.Optimizer]
_COMPILED_PREFIX = "_orig_mod."


def _models(model: object) -> dict[str, torch.nn.Module]:
    if isinstance(model, torch.nn.Module):
        found: dict[str, object] = {"": model}
    elif isinstance(model, Mapping):
        found = {str(k): v for k, v in model.items()}
    elif isinstance(model, Sequence) and not isinstance(model, str):
        found = {str(i): m for i, m in enumerate(model)}
    else:
        found = {"?": model}
    bad = {k: v for k, v in found.items() if not isinstance(v, torch.nn.Module)}
    if bad or not found:
        raise ConfigError(
            "watch(model, ...) needs a torch.nn.Module, a list of them or a dict name -> "
            f"module (e.g. {{'G': generator, 'D': discriminator}}), got {model!r:.200}"
        )
    return {k: v for k, v in found.items() if isinstance(v, torch.nn.Module)}


def _optimizers(optimizer: object) -> list[torch.optim.Optimizer]:
    items = (
        [optimizer]
        if isinstance(optimizer, torch.optim.Optimizer)
        else (
            list(optimizer)
            if isinstance(optimizer, Sequence) and not isinstance(optimizer, str)
            else [optimizer]
        )
    )
    if not items or not all(isinstance(o, torch.optim.Optimizer) for o in items):
        raise ConfigError(
            "watch(model, optimizer) needs a torch.optim.Optimizer or a list of them "
            f"(one per model for a GAN), got {optimizer!r:.200}"
        )
    if len({id(o) for o in items}) != len(items):
        raise ConfigError("the same optimizer was passed twice to watch()")
    return [o for o in items if isinstance(o, torch.optim.Optimizer)]


def _by_hand(models: Mapping[str, torch.nn.Module]) -> ManualUpdates:
    """The stand-in optimizer of a loop that updates its parameters by hand."""
    params: dict[int, torch.Tensor] = {}
    for m in models.values():
        params.update((id(p), p) for p in m.parameters() if p.requires_grad)
    if not params:
        raise ConfigError(
            "watch(model) without an optimizer needs a model with trainable parameters "
            "(every parameter has requires_grad=False)"
        )
    return ManualUpdates(list(params.values()))


def _names(
    models: Mapping[str, torch.nn.Module], optimizers: list[torch.optim.Optimizer]
) -> dict[int, str]:
    names: dict[int, str] = {}
    for key, model in models.items():
        prefix = f"{key}." if key else ""
        for name, p in model.named_parameters():
            names.setdefault(id(p), prefix + name.replace(_COMPILED_PREFIX, ""))
    for i, opt in enumerate(optimizers):
        held = [p for g in opt.param_groups for p in g["params"]]
        if not any(id(p) in names for p in held):
            raise ConfigError(
                f"optimizer {i} ({type(opt).__name__}) holds none of the watched model's "
                "parameters: pass the model(s) it trains, e.g. watch([G, D], [opt_g, opt_d])"
            )
        for j, group in enumerate(opt.param_groups):
            for k, p in enumerate(group["params"]):
                names.setdefault(id(p), f"optimizer{i}.group{j}.{k}")
    return names


def _optimizer_names(optimizers: list[torch.optim.Optimizer]) -> dict[int, str]:
    """Optimizer index -> the script's variable for it (``optimizerG``), where one is found
    and it is unique: findings then name it instead of ``optimizer 0``."""
    from gradwatch.session.autowatch import variable_names

    if len(optimizers) < 2:
        return {}  # one optimizer: "optimizer 0" is unambiguous, no frame walk
    found = variable_names(optimizers, sys._getframe(1))
    unique = [n for n in found if n is not None and found.count(n) == 1]
    return {i: n for i, n in enumerate(found) if n in unique}


def _plain(value: Any) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.device.type == "cpu":
        return float(value)
    return repr(value)


class _Kernel(TypedDict, total=False):
    stats_kernel: str


class _Ranks(TypedDict, total=False):
    ddp: dict[str, Any]


def _layout(optimizers: list[torch.optim.Optimizer], names: dict[int, str]) -> RunLayout:
    tensors: list[TensorMeta] = []
    opts: list[OptimizerMeta] = []
    for i, opt in enumerate(optimizers):
        groups = []
        for j, group in enumerate(opt.param_groups):
            groups.append({k: _plain(v) for k, v in group.items() if k != "params"})
            for p in group["params"]:
                tensors.append(
                    {
                        "name": names[id(p)],
                        "shape": list(p.shape),
                        "dtype": str(p.dtype).removeprefix("torch."),
                        "numel": p.numel(),
                        "device": str(p.device),
                        "optimizer": i,
                        "group": j,
                        "requires_grad": p.requires_grad,
                    }
                )
        opts.append({"class": type(opt).__name__, "groups": groups})
    return {"tensors": tensors, "optimizers": opts}


def _run_dir(root: Any, run_id: str) -> Any:
    run_dir = paths.runs_dir(root) / run_id
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the run directory {run_dir} ({exc.strerror}); pass "
            "data_dir=... or set GRADWATCH_DIR to a writable folder"
        ) from exc
    return run_dir


def watch(
    model: ModelArg,
    optimizer: OptimizerArg | None = None,
    *,
    project: str | None = None,
    name: str | None = None,
    config: object = None,
    tags: Iterable[str] | None = None,
    accumulation_steps: int | None = None,
    every: int = 1,
    checks: Mapping[str, Policy] | None = None,
    server: str | None = None,
    token: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    transfer_every: int | None = None,
    batch_checksum: bool = True,
    allow_mutation: Iterable[str] | None = None,
    scaler: torch.amp.GradScaler | None = None,
    ddp_every: int | None = None,
    stats: Literal["all", "grad-norms"] = "all",
    **unknown: NoReturn,
) -> Run:
    """Attach gradwatch to a model and its optimizer(s); returns the :class:`Run`.

    ``model``: a module, a list of modules or a ``{name: module}`` dict; ``optimizer``: one
    optimizer or a list. Without an optimizer, the loop is taken to update the parameters by
    hand (``p.data.add_(-lr * p.grad)``): each change of the trainable parameters after a
    backward pass is one step (:mod:`gradwatch.hooks.manual_updates`).

    Options, all keyword-only and validated at setup by
    :func:`gradwatch.session.options.resolve` (a bad or unknown one raises
    :class:`gradwatch.ConfigError`; nothing is created):

    * ``project``: the project the run is filed under (``$GRADWATCH_PROJECT``, else
      ``"default"``); ``name``: its display name (the run id); ``tags``: strings;
    * ``config``: the training config (dict, ``argparse.Namespace`` or dataclass), hashed
      to group replicates;
    * ``accumulation_steps``: declared gradient accumulation (inferred otherwise);
    * ``every``: collect statistics every N optimizer steps (1);
    * ``checks``: ``{check id: policy}`` (off, record, warn, raise, skip, checkpoint), over
      ``$GRADWATCH_CHECKS``;
    * ``server``: URL to stream to (``$GRADWATCH_SERVER``); ``token``: its API token
      (``$GRADWATCH_TOKEN``);
    * ``data_dir``: where the spool lives (``$GRADWATCH_DIR``);
    * ``transfer_every``: device-to-host transfer period in steps (10 on accelerators; on
      the CPU rows go to the writer in groups at most 0.5 s old);
    * ``batch_checksum``: checksum every training batch (data-order diagnosis; True);
    * ``allow_mutation``: name patterns allowed to change outside ``step()`` (EMA);
    * ``scaler``: the ``torch.amp.GradScaler`` (found by itself at its first ``scale()``);
    * ``ddp_every``: DDP, steps between cross-rank parameter comparisons
      (``$GRADWATCH_DDP_EVERY``, else 50);
    * ``stats``: ``"all"``, or ``"grad-norms"``: gradient norms and non-finite counts only —
      no parameter snapshot, parameter or update norms, and the checks that need them are
      off.

    Example::

        run = gradwatch.watch(model, optimizer, project="mnist", config=vars(args))
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        run.close()
    """
    if unknown:
        raise ConfigError(
            f"watch() got unknown option(s) {sorted(unknown)}; known: {sorted(OPTIONS)}"
        )
    opts = options.resolve(
        project=project,
        name=name,
        config=config,
        tags=tags,
        accumulation_steps=accumulation_steps,
        every=every,
        checks=checks,
        server=server,
        token=token,
        data_dir=data_dir,
        transfer_every=transfer_every,
        batch_checksum=batch_checksum,
        allow_mutation=allow_mutation,
        scaler=scaler,
        ddp_every=ddp_every,
        stats=stats,
    )
    models = _models(model)
    optimizers: list[torch.optim.Optimizer] = (
        [_by_hand(models)] if optimizer is None else _optimizers(optimizer)
    )
    names = _names(models, optimizers)
    params = [p for o in optimizers for g in o.param_groups for p in g["params"]]
    device = params[0].device if params else torch.device("cpu")
    rank, no_ranks = ddp.join()
    run_id = paths.new_run_id() if rank is None else rank.run_id
    run_dir = _run_dir(opts.data_dir, run_id)
    # the fused CPU norms (compiled on a machine's first run, then cached), loaded before
    # the fingerprint, which records whether they are used
    kernel_line = hostnorms.load()[1] if device.type == "cpu" else None
    fast = fingerprint.collect_fast(
        params, config=opts.config, names=[names[id(p)] for p in params]
    )
    kernel: _Kernel = {} if kernel_line is None else {"stats_kernel": kernel_line}
    ranks: _Ranks = {} if rank is None else {"ddp": rank.meta()}
    start = records.run_start_record(
        {
            "run": run_id,
            "project": opts.project,
            "name": opts.name or run_id,
            "tags": list(opts.tags),
            "config": opts.config,
            "config_hash": opts.config_hash,
            "started_at": time.time(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "argv": list(sys.argv),
            "schema": SCHEMA_VERSION,
            "gradwatch": __version__,
            "stats": list(STAT_NAMES),
            **kernel,
            "options": {
                "every": opts.every,
                "accumulation_steps": opts.accumulation_steps,
                "checks": opts.checks,
                "batch_checksum": opts.batch_checksum,
                "ddp_every": opts.ddp_every,
                "stats": opts.stats,
            },
            **ranks,
            "job": jobs.job_id(run_id, None if rank is None else rank.group),
            "models": [
                {
                    "key": k,
                    "class": type(m).__name__,
                    "numel": sum(p.numel() for p in m.parameters()),
                }
                for k, m in models.items()
            ],
            **_layout(optimizers, names),
        }
    )
    run = Run(
        run_id=run_id,
        run_dir=run_dir,
        options=opts,
        models=models,
        optimizers=optimizers,
        names=names,
        device=device,
    )
    run._sink.optimizer_names = _optimizer_names(optimizers)
    if rank is not None:
        # its cross-rank checks read each window of rows on the I/O thread, after the checks
        run._ranks = run._pipeline.ranks = ddp.RankSync(run._ctx, rank, opts.ddp_every, fast)
    if no_ranks:
        run._report_once("ddp", f"cross-rank checks are off: {no_ranks}")
    run._start([start, records.fingerprint_record("fast", fast)], fast)
    if opts.scaler is None:
        ampdetect.install(run)
    _fingerprint_later(run)
    return run


def _fingerprint_later(run: Run) -> None:
    """The slow part of the fingerprint (git, installed packages) on a short-lived thread."""
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    cwd = os.getcwd()

    def collect() -> None:
        try:
            slow = provenance.collect_slow(script=script, cwd=cwd)
        except Exception as exc:  # the fingerprint is best effort, training goes on
            run._report_once("fingerprint", f"fingerprint incomplete ({exc})")
            return
        run._io.submit(records.fingerprint_record("slow", slow))

    thread = threading.Thread(target=collect, name="gradwatch-fingerprint", daemon=True)
    thread.start()
    run._background.append(thread)

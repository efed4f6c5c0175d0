"""The Markdown report of benchmarks/peers.py (tables from its JSON result)."""

from __future__ import annotations

from typing import Any

#: (gradwatch variant, peer): the issue's acceptance pairs, each at equal or greater recorded
#: content on gradwatch's side, and the grad-norms option against aim (which, like
#: TensorBoard scalars, records gradient norms only)
COMPARISONS: tuple[tuple[str, str], ...] = (
    ("gradwatch", "wandb_gradients"),
    ("gradwatch", "wandb_all"),
    ("gradwatch", "mlflow_sync"),
    ("gradwatch", "mlflow_async"),
    ("gradwatch", "aim"),
    ("gradwatch", "tensorboard_histograms"),
    ("gradwatch_grad_norms", "tensorboard_scalars"),
    ("gradwatch_grad_norms", "aim"),
    ("gradwatch", "tensorboard_scalars"),
)


def _range(e: dict[str, float] | None, fmt: str = "{:.2f}") -> str:
    if not e:
        return "–"
    return f"{fmt.format(e['median'])} [{fmt.format(e['min'])}, {fmt.format(e['max'])}]"


def _header(result: dict[str, Any]) -> list[str]:
    m, cfg = result["machine"], result["config"]
    loads = [x for r in result["models"].values() for x in r["loadavg_1min_per_rep"]]
    load = f"{min(loads):.2f}–{max(loads):.2f}" if loads else "n/a"
    peers = ", ".join(f"{k} {v or 'not installed'}" for k, v in result["peers"].items())
    return [
        "# gradwatch next to its peers: added time per training step at"
        f" {result.get('threads_label', '?')} threads",
        "",
        f"{m['date']} · {m['cpu_model']} ({m['logical_cpus']} logical CPUs) · torch {m['torch']}"
        f" · gradwatch {m['gradwatch']} (sources {m['gradwatch_sources_sha256']})"
        f" · {peers} · `torch.set_num_threads({m['torch_num_threads']})`"
        f" · 1-min load average during the run {load}",
        "",
        f"`{cfg['command']}` — {cfg['reps']} repetitions × {cfg['steps']} steps per variant"
        f" (+{cfg['warmup']} warm-up steps), Adam, interleaved in rotating order; every block"
        f" starts with {cfg.get('settle', 0)} untimed steps and is paired with the plain block"
        " of the same repetition. Every tracker keeps one run per model through all blocks"
        " (gradwatch: `watch()` before the first, `run.flush()` at each block's end, in the"
        " flush column).",
        "",
    ]


def _model_table(name: str, r: dict[str, Any]) -> list[str]:
    rss = r.get("peak_rss", {})
    lines = [
        f"## {name}: {r['description']} ({r['params']:,} parameters, {r['tensors']} tensors)",
        "",
        "| variant | step ms | ratio to plain | added ms | added process CPU ms "
        "| added process-tree CPU ms | flush ms | peak RSS MiB (+ helpers) | added MiB |",
        "|---|---:|---|---|---|---|---|---|---:|",
    ]
    for v, e in r["variants"].items():
        peak = rss.get(v, {})
        mem = f"{peak['peak_mib']:.0f} (+ {peak['helpers_mib']:.0f})" if "peak_mib" in peak else "–"
        added_mem = f"{peak['added_mib']:.0f}" if "added_mib" in peak else "–"
        lines.append(
            f"| {v} | {e['wall']['median_ms']:.2f} | {_range(e['wall'].get('ratio_to_plain'))} "
            f"| {_range(e['wall'].get('added_ms'))} "
            f"| {_range(e['process_cpu'].get('added_ms'))} "
            f"| {_range(e['tree_cpu'].get('added_ms'))} "
            f"| {_range(e['flush_ms'], '{:.1f}')} | {mem} | {added_mem} |"
        )
    return [*lines, ""]


def _verdicts(result: dict[str, Any]) -> list[str]:
    lines = [
        "## gradwatch against each peer",
        "",
        "Added wall ms per step, paired with plain: median [min, max] over repetitions."
        " gradwatch is ahead when its median is below the peer's; *ranges overlap* marks"
        " a verdict the repetitions' spread does not settle. aim and TensorBoard scalars"
        " record gradient norms only, as gradwatch_grad_norms does; the last row per model"
        " sets full gradwatch (more content) against TensorBoard scalars.",
        "",
        "| model | gradwatch variant | peer | gradwatch added ms | peer added ms | ahead |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in result["models"].items():
        vs = r["variants"]
        for ours, peer in COMPARISONS:
            if ours not in vs or peer not in vs:
                continue
            ea, eb = vs[ours]["wall"]["added_ms"], vs[peer]["wall"]["added_ms"]
            verdict = "yes" if ea["median"] < eb["median"] else "**no**"
            if ea["max"] >= eb["min"] and eb["max"] >= ea["min"]:
                verdict += " (ranges overlap)"
            lines.append(f"| {name} | {ours} | {peer} | {_range(ea)} | {_range(eb)} | {verdict} |")
    return [*lines, ""]


def _one_time(result: dict[str, Any]) -> list[str]:
    lines = [
        "## One-time costs",
        "",
        "Wall ms of setting each variant up (gradwatch: `watch()` + its fingerprint thread,"
        " per block, median [min, max]) and of closing it; not in the step times.",
        "",
        "| model | variant | setup ms | close ms |",
        "|---|---|---|---:|",
    ]
    for name, r in result["models"].items():
        for v, e in r["variants"].items():
            if v != "plain":
                lines.append(
                    f"| {name} | {v} | {_range(e['setup_ms'], '{:.0f}')} | {e['close_ms']:.0f} |"
                )
    return [*lines, ""]


SHORT: dict[str, str] = {
    "plain": "—",
    "lower_bound": "grad, param, update norms + non-finite counts, in memory",
    "gradwatch": "grad, param, exact update norms, non-finite counts, loss, batch checksum,"
    " timings, integrity checks",
    "gradwatch_stock_ops": "as gradwatch, CPU norm kernel off (the before)",
    "gradwatch_grad_norms": "grad norms, non-finite counts, loss, batch checksum, timings,"
    " the checks that need no parameter or update norms",
    "wandb_gradients": "64-bin histogram of each gradient + loss",
    "wandb_all": "64-bin histograms of each gradient and parameter + loss",
    "tensorboard_scalars": "grad norm of each tensor",
    "tensorboard_histograms": "histogram of each gradient",
    "mlflow_sync": "grad norm of each tensor",
    "mlflow_async": "grad norm of each tensor",
    "aim": "grad norm of each tensor",
}


def _cell(e: dict[str, Any] | None) -> str:
    if e is None:
        return "–"
    wall = e["wall"]
    return f"{wall['added_ms']['median']:+.1f} ({wall['ratio_to_plain']['median']:.2f}×)"


def summary(result: dict[str, Any]) -> list[str]:
    """One row per variant: added ms per step (ratio to plain) on each model, the added
    peak RSS, and what it records (the README's Performance table)."""
    models = result["models"]
    names = list(dict.fromkeys(v for r in models.values() for v in r["variants"]))
    plain = [
        f"{m} ({r['variants']['plain']['wall']['median_ms']:.1f} ms)" for m, r in models.items()
    ]
    lines = [
        "## Summary",
        "",
        "Added wall ms per step (× plain's step time) on each model (plain's step time in"
        " the header), median over repetitions; added peak RSS of the process and its"
        " helpers, the largest over the models measured.",
        "",
        "| variant | records per step | " + " | ".join(plain) + " | added RSS MiB |",
        "|---|---|" + "---:|" * len(models) + "---:|",
    ]
    for v in names[1:]:
        cells = " | ".join(_cell(r["variants"].get(v)) for r in models.values())
        mibs = [r["peak_rss"][v].get("added_mib") for r in models.values() if "peak_rss" in r]
        mib = max((x for x in mibs if x is not None), default=None)
        shown = "–" if mib is None else f"{mib:.0f}"
        lines.append(f"| {v} | {SHORT.get(v, '')} | {cells} | {shown} |")
    return [*lines, ""]


def markdown(result: dict[str, Any]) -> str:
    """The whole report."""
    lines = _header(result)
    lines += summary(result)
    for name, r in result["models"].items():
        lines += _model_table(name, r)
    lines += _verdicts(result)
    lines += ["## What each variant records per step", "", "| variant | records |", "|---|---|"]
    lines += [f"| {v} | {text} |" for v, text in result["config"]["records"].items()]
    lines += [""]
    if result["unavailable"]:
        lines += ["## Not measured", ""]
        lines += [f"- **{v}**: {why}" for v, why in result["unavailable"].items()]
        lines += [""]
    lines += _one_time(result)
    lines += [
        "Added process CPU: CPU time of every thread of the benchmark process over the block,"
        " flush included, per step, minus plain's. Process tree adds the CPU time of the"
        " benchmark's child processes (wandb-core writes wandb's offline run in one). Peak"
        " RSS: one process per variant running it alone (`--rss-child`), VmHWM of that"
        " process and, in parentheses, of its helper processes; added = both − plain's.",
        "",
    ]
    return "\n".join(lines)

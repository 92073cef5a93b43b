"""What a simulation leaves behind: summary.json, per-policy job and timeline CSVs, plots people look at, and
report.html, all of it in one page (`pollux.sim.report_html`)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pollux.sim.palette import policy_colors
from pollux.sim.run import SimResult
from pollux.sim.table import HOUR_S, in_table_order, several_gpu_types

PANELS_PER_ROW = 4  # gpu-hours-by-type.png: eight policies in one row made a 3,000-px strip


def write_outputs(results: Sequence[SimResult], out_dir: Path, title: str = "", num_gpus: int = 0) -> list[Path]:
    """Write summary.json (`summary_json`), jobs-<policy>.csv, timeline-<policy>.csv, the plots (with autoscaling
    also nodes-<policy>.csv and nodes-timeline.png) and report.html (titled `title`, on a cluster of `num_gpus`);
    return the paths written. Plots and report list the policies in the table's order (`pollux.sim.table`)."""
    from pollux.sim.report_html import write_report

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    summary_path = out_dir / "summary.json"
    summary_path.write_text(json.dumps(summary_json(results), indent=2, sort_keys=True) + "\n")
    written.append(summary_path)
    for result in results:
        written.append(_write_csv(out_dir / f"jobs-{result.policy}.csv", [j.as_row() for j in result.jobs]))
        written.append(_write_csv(out_dir / f"timeline-{result.policy}.csv", [p.as_row() for p in result.timeline]))
        if result.nodes:
            written.append(_write_csv(out_dir / f"nodes-{result.policy}.csv", [p.as_row() for p in result.nodes]))
    ordered = in_table_order(results)
    written.extend(plot(ordered, out_dir))
    written.append(write_report(ordered, out_dir, title or "simulation", num_gpus))
    return written


def summary_json(results: Sequence[SimResult]) -> dict[str, dict[str, object]]:
    """What summary.json holds: per policy its metrics and `wall_s`; in a run with tenants, a `tenants` object keyed
    by tenant, and in one with experiments an `experiments` object keyed by experiment
    (`pollux.sim.experiments.experiment_summary`), beside the policy's metrics."""
    summary: dict[str, dict[str, object]] = {r.policy: dict(r.summary, wall_s=r.wall_s) for r in results}
    for result in results:
        if result.tenants:
            summary[result.policy]["tenants"] = result.tenants
        if result.experiments:
            summary[result.policy]["experiments"] = result.experiments
    return summary


def _write_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    with path.open("w", newline="") as handle:
        if rows:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return path


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (imported here: `pollux simulate --help` need not load it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(results: Sequence[SimResult], out_dir: Path) -> list[Path]:
    """Write the plots of `figures` as PNGs in `out_dir`; return their paths."""
    plt = _pyplot()
    paths = []
    for name, fig in figures(results).items():
        paths.append(out_dir / name)
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def figures(results: Sequence[SimResult]) -> dict[str, Any]:
    """The plots of a run by file name, each policy in its colour (`pollux.sim.palette`) and every legend in the
    order of `results`: the JCT CDF, the cluster over time, GPU-hours by type only where the jobs had several GPU
    types to run on (on one, it is a strip of one-colour panels), the nodes over time only where the run autoscaled."""
    made = {"jct-cdf.png": jct_cdf(results), "cluster-timeline.png": cluster_timeline(results)}
    if several_gpu_types(results):
        made["gpu-hours-by-type.png"] = gpu_hours_by_type(results)
    if any(r.nodes for r in results):
        made["nodes-timeline.png"] = nodes_timeline(results)
    return made


def jct_cdf(results: Sequence[SimResult]) -> Any:
    """Fraction of jobs finished by each JCT, per policy."""
    import numpy as np

    colors = policy_colors(r.policy for r in results)
    fig, ax = _pyplot().subplots(figsize=(7, 4.5), layout="constrained")
    for result in results:
        jct = np.sort([j.jct_s / HOUR_S for j in result.jobs if j.jct_s is not None])
        if jct.size:
            y = np.arange(1, jct.size + 1) / jct.size
            ax.step(jct, y, where="post", label=result.policy, color=colors[result.policy])
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs finished")
    ax.set_title("Job completion time, CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")  # a CDF climbs from the lower left: its lower right stays empty
    return fig


def cluster_timeline(results: Sequence[SimResult]) -> Any:
    """GPUs in use above jobs queued, over time, per policy."""
    colors = policy_colors(r.policy for r in results)
    fig, (top, bottom) = _pyplot().subplots(2, 1, figsize=(8, 6.5), sharex=True, layout="constrained")
    for result in results:
        hours = [p.time_s / HOUR_S for p in result.timeline]
        color = colors[result.policy]
        top.plot(hours, [p.gpus_in_use for p in result.timeline], label=result.policy, lw=1, color=color)
        bottom.plot(hours, [p.jobs_queued for p in result.timeline], lw=1, color=color)
    top.set_ylabel("GPUs in use")
    bottom.set_ylabel("jobs queued")
    bottom.set_xlabel("simulated time (hours)")
    top.set_title("Cluster over time")
    _finish_stack(fig, (top, bottom), len(results))
    return fig


def gpu_hours_by_type(results: Sequence[SimResult]) -> Any:
    """GPU-hours per job of each model, split by the GPU type they ran on, one panel per policy (the Sia paper's
    Figure 6): where a policy put each kind of job. Panels four to a row."""
    import numpy as np

    apps = sorted({j.application for r in results for j in r.jobs})
    types = list(dict.fromkeys(t for r in results for j in r.jobs for t in j.gpu_seconds_by_type))
    columns = min(len(results), PANELS_PER_ROW)
    rows = -(-len(results) // columns)
    fig, axes = _pyplot().subplots(
        rows, columns, figsize=(3.2 * columns + 1, 3.6 * rows + 0.6), sharey=True, squeeze=False, layout="constrained"
    )
    for ax, result in zip(axes.flat, results, strict=False):
        bottom = np.zeros(len(apps))
        for gpu_type in types:
            hours = np.array(
                [
                    np.mean([j.gpu_seconds_by_type.get(gpu_type, 0.0) for j in result.jobs if j.application == a])
                    / HOUR_S
                    for a in apps
                ]
            )
            ax.bar(apps, hours, bottom=bottom, label=gpu_type)
            bottom += hours
        ax.set_title(result.policy)
        ax.tick_params(axis="x", rotation=45)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes.flat[len(results) :]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("GPU-hours per job")
    axes[0][0].legend(title="GPU type", loc="upper left")
    fig.suptitle("Where each model ran: GPU-hours per job by GPU type")
    return fig


def nodes_timeline(results: Sequence[SimResult]) -> Any:
    """Nodes billed (booting included) and ready over time, per autoscaled policy, above the GPUs it kept busy."""
    colors = policy_colors(r.policy for r in results)
    autoscaled = [r for r in results if r.nodes]
    fig, (top, bottom) = _pyplot().subplots(2, 1, figsize=(8, 6.5), sharex=True, layout="constrained")
    for result in autoscaled:
        hours = [p.time_s / HOUR_S for p in result.nodes]
        color = colors[result.policy]
        top.step(hours, [p.nodes_billed for p in result.nodes], where="post", label=result.policy, lw=1, color=color)
        top.step(hours, [p.nodes_ready for p in result.nodes], where="post", color=color, lw=1, ls=":")
        busy = [p.gpus_in_use for p in result.timeline]
        bottom.plot([p.time_s / HOUR_S for p in result.timeline], busy, lw=1, color=color)
    top.set_ylabel("nodes (solid: billed, dotted: ready)")
    bottom.set_ylabel("GPUs in use")
    bottom.set_xlabel("simulated time (hours)")
    top.set_title("Autoscaled cluster over time")
    _finish_stack(fig, (top, bottom), len(autoscaled))
    return fig


def _finish_stack(fig: Any, axes: Sequence[Any], entries: int) -> None:
    """Grid lines, and the figure's one legend below its plots, outside every axes, so it covers no curve."""
    for axis in axes:
        axis.grid(True, alpha=0.3)
    fig.legend(loc="outside lower center", ncols=min(entries, 4), frameon=False)

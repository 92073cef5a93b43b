"""What a simulation leaves behind: summary.json, per-policy job and timeline CSVs, plots people look at, and
report.html, all of it in one page (`pollux.sim.report_html`)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from pollux.sim.run import SimResult

HOUR_S = 3600.0


def write_outputs(results: Sequence[SimResult], out_dir: Path, title: str = "", num_gpus: int = 0) -> list[Path]:
    """Write summary.json, jobs-<policy>.csv, timeline-<policy>.csv, the plots (with autoscaling also
    nodes-<policy>.csv and nodes-timeline.png) and report.html (titled `title`, on a cluster of `num_gpus`); return
    the paths written."""
    from pollux.sim.report_html import write_report

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    summary_path = out_dir / "summary.json"
    summary = {r.policy: dict(r.summary, wall_s=r.wall_s) for r in results}
    summary_path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    written.append(summary_path)
    for result in results:
        written.append(_write_csv(out_dir / f"jobs-{result.policy}.csv", [j.as_row() for j in result.jobs]))
        written.append(_write_csv(out_dir / f"timeline-{result.policy}.csv", [p.as_row() for p in result.timeline]))
        if result.nodes:
            written.append(_write_csv(out_dir / f"nodes-{result.policy}.csv", [p.as_row() for p in result.nodes]))
    written.extend(plot(results, out_dir))
    if any(result.nodes for result in results):
        written.append(plot_nodes(results, out_dir / "nodes-timeline.png"))
    written.append(write_report(results, out_dir, title or "simulation", num_gpus))
    return written


def _write_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    with path.open("w", newline="") as handle:
        if rows:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return path


def plot(results: Sequence[SimResult], out_dir: Path) -> list[Path]:
    """JCT CDF per policy, and GPUs in use / jobs queued over time per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for result in results:
        jct = np.sort([j.jct_s / HOUR_S for j in result.jobs if j.jct_s is not None])
        if jct.size:
            ax.step(jct, np.arange(1, jct.size + 1) / jct.size, where="post", label=result.policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs finished")
    ax.set_title("Job completion time, CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "jct-cdf.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for result in results:
        hours = [p.time_s / HOUR_S for p in result.timeline]
        top.plot(hours, [p.gpus_in_use for p in result.timeline], label=result.policy, lw=1)
        bottom.plot(hours, [p.jobs_queued for p in result.timeline], label=result.policy, lw=1)
    top.set_ylabel("GPUs in use")
    bottom.set_ylabel("jobs queued")
    bottom.set_xlabel("simulated time (hours)")
    top.set_title("Cluster over time")
    top.legend(loc="upper right")
    for axis in (top, bottom):
        axis.grid(True, alpha=0.3)
    fig.tight_layout()
    paths.append(out_dir / "cluster-timeline.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    paths.append(plot_gpu_hours_by_type(results, out_dir / "gpu-hours-by-type.png"))
    return paths


def plot_gpu_hours_by_type(results: Sequence[SimResult], path: Path) -> Path:
    """GPU-hours per job of each model, split by the GPU type they ran on, one panel per policy (the Sia paper's
    Figure 6): where a policy put each kind of job."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    apps = sorted({j.application for r in results for j in r.jobs})
    types = list(dict.fromkeys(t for r in results for j in r.jobs for t in j.gpu_seconds_by_type))
    fig, axes = plt.subplots(1, len(results), figsize=(3.2 * len(results) + 1, 4), sharey=True, squeeze=False)
    for ax, result in zip(axes[0], results, strict=True):
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
    axes[0][0].set_ylabel("GPU-hours per job")
    axes[0][0].legend(title="GPU type", loc="upper left")
    fig.suptitle("Where each model ran: GPU-hours per job by GPU type")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_nodes(results: Sequence[SimResult], path: Path) -> Path:
    """Nodes billed (booting included) and ready over time, per autoscaled policy, above the GPUs it kept busy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for result in (r for r in results if r.nodes):
        hours = [p.time_s / HOUR_S for p in result.nodes]
        (line,) = top.step(hours, [p.nodes_billed for p in result.nodes], where="post", label=result.policy, lw=1)
        top.step(hours, [p.nodes_ready for p in result.nodes], where="post", color=line.get_color(), lw=1, ls=":")
        bottom.plot([p.time_s / HOUR_S for p in result.timeline], [p.gpus_in_use for p in result.timeline], lw=1)
    top.set_ylabel("nodes (solid: billed, dotted: ready)")
    bottom.set_ylabel("GPUs in use")
    bottom.set_xlabel("simulated time (hours)")
    top.set_title("Autoscaled cluster over time")
    top.legend(loc="upper right")
    for axis in (top, bottom):
        axis.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

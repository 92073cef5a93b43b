"""What a simulation leaves behind: summary.json, per-policy job and timeline CSVs, and plots people look at."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from pollux.sim.run import SimResult

HOUR_S = 3600.0


def write_outputs(results: Sequence[SimResult], out_dir: Path) -> list[Path]:
    """Write summary.json, jobs-<policy>.csv, timeline-<policy>.csv and the plots; return the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    summary_path = out_dir / "summary.json"
    summary = {r.policy: dict(r.summary, wall_s=r.wall_s) for r in results}
    summary_path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    written.append(summary_path)
    for result in results:
        written.append(_write_csv(out_dir / f"jobs-{result.policy}.csv", [j.as_row() for j in result.jobs]))
        written.append(_write_csv(out_dir / f"timeline-{result.policy}.csv", [p.as_row() for p in result.timeline]))
    written.extend(plot(results, out_dir))
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
    return paths

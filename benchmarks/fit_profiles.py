"""How well the throughput model fits the measured step times of six real jobs.

Per model: RMSLE of step time fitted on all placements.csv + scalability.csv rows (goal < 0.10), RMSLE on
multi-node rows when fitted on single-node rows only (extrapolation, which the scheduler relies on), and two
floors that explain what is left: the best step-time RMSLE any parameter values of this model form can reach
(global search on step time alone), and the measurement noise (a free smooth curve per placement).

Run: .venv/bin/python -m benchmarks.fit_profiles [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy.optimize import differential_evolution

from pollux.calibration import fit_profile, profile_samples
from pollux.data.locate import find_data_dir
from pollux.data.profiles import MODELS, JobProfile, load_profile
from pollux.goodput import ThroughputParams, ThroughputSamples, iteration_time


def model_form_floor(samples: ThroughputSamples) -> float:
    """Lowest step-time RMSLE over all parameter values (differential evolution, seeded)."""
    log_step = np.log(samples.step_time)

    def loss(theta: np.ndarray) -> float:
        params = ThroughputParams.from_array(np.r_[np.exp(theta[:6]), theta[6]])
        pred = iteration_time(params, samples.num_nodes, samples.num_replicas, samples.local_bsz)
        return float(np.sqrt(np.mean((np.log(pred) - log_step) ** 2)))

    bounds = [(np.log(1e-8), np.log(10.0))] * 6 + [(1.0, 10.0)]
    return float(differential_evolution(loss, bounds, seed=0, maxiter=200, tol=1e-7, polish=True).fun)


def noise_floor(profile: JobProfile) -> float:
    """RMSLE left by a free quadratic in log(local_bsz) per placement: what no throughput model can explain."""
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    rows = profile.placements
    for key, bsz, step in zip(rows.placement, rows.local_bsz, rows.step_time, strict=True):
        groups[key].append((bsz, step))
    scal = profile.scalability
    for n, k, bsz, step in zip(scal.num_nodes, scal.num_replicas, scal.local_bsz, scal.step_time, strict=True):
        groups[f"{n}x{k}"].append((bsz, step))
    residuals = []
    for points in groups.values():
        x, y = np.log(np.array(points)).T
        coeffs = np.polyfit(x, y, min(2, len(points) - 1))
        residuals.append(y - np.polyval(coeffs, x))
    return float(np.sqrt(np.mean(np.concatenate(residuals) ** 2)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    data_dir = find_data_dir(args.data_dir).path

    table = Table(title="Throughput model on measured profiles (RMSLE of step time unless noted)")
    columns = (
        "model",
        "all rows",
        "multi-node extrap.",
        "compute",
        "model-form floor",
        "noise floor",
        "fit ms",
    )
    for name in columns:
        table.add_column(name, justify="left" if name == "model" else "right")
    for model in MODELS:
        profile = load_profile(model, data_dir)
        start = time.perf_counter()
        report = fit_profile(profile)
        fit_ms = (time.perf_counter() - start) * 1e3 / 2  # fit_profile fits twice
        table.add_row(
            model,
            f"{report.step_rmsle:.4f}",
            f"{report.multi_node_rmsle:.4f}",
            f"{report.compute_rmsle:.4f}",
            f"{model_form_floor(profile_samples(profile)):.4f}",
            f"{noise_floor(profile):.4f}",
            f"{fit_ms:.1f}",
        )
    Console(width=120).print(table)


if __name__ == "__main__":
    main()

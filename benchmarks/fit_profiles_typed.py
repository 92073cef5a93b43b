"""How well the throughput model fits each GPU type's measured step times (the Sia artifact's six types).

Per (model, GPU type), the throughput model fitted to that type's own rows (placements-<type>.csv +
scalability-<type>.csv, `pollux.calibration.profile_samples`): RMSLE of step time and of compute time on all rows,
RMSLE on multi-node rows when fitted on single-node rows only (— where the type was profiled on one node), and the
measurement noise floor (`benchmarks.fit_profiles.noise_floor`). Two more columns say why a GPU type is described
by its own `ThroughputParams` rather than by one speed factor: the fitted compute time and the fitted 2-node sync
time of 8 GPUs on `aws` (T4), divided by the same on this type, at the type's largest common per-GPU batch. Where
one factor would do, the two columns would agree.

Prints; asserts nothing. Run: .venv/bin/python -m benchmarks.fit_profiles_typed [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.fit_profiles import noise_floor
from pollux.calibration import profile_samples, subset
from pollux.data.locate import find_data_dir
from pollux.data.profiles import MODELS, JobProfile, load_typed_profiles
from pollux.goodput import ThroughputParams, compute_time, fit_throughput, iteration_time, rmsle

REFERENCE_TYPE = "aws"


def sync_time(params: ThroughputParams, num_nodes: int, num_replicas: int, local_bsz: int) -> float:
    """The fitted step time beyond compute: what synchronizing adds."""
    step = float(iteration_time(params, num_nodes, num_replicas, local_bsz))
    return step - float(compute_time(params, local_bsz))


def fit_row(profile: JobProfile, reference: ThroughputParams, local_bsz: int) -> tuple[str, ...]:
    samples = profile_samples(profile)
    params = fit_throughput(samples)
    compute_err, step_err = rmsle(params, samples)
    single = samples.num_nodes == 1
    extrapolation = "—"
    if np.any(~single):
        _, err = rmsle(fit_throughput(subset(samples, single)), subset(samples, ~single))
        extrapolation = f"{err:.3f}"
    compute_x = float(compute_time(reference, local_bsz)) / float(compute_time(params, local_bsz))
    sync_x = sync_time(reference, 2, 8, local_bsz) / max(sync_time(params, 2, 8, local_bsz), 1e-9)
    return (
        str(len(samples)),
        f"{step_err:.3f}",
        f"{compute_err:.3f}",
        extrapolation,
        f"{noise_floor(profile):.3f}",
        f"{compute_x:.2f}",
        f"{sync_x:.2f}" if math.isfinite(sync_x) else "—",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="the sia-sosp23 folder (default: found)")
    args = parser.parse_args()
    data_dir = find_data_dir(args.data_dir, "sia-sosp23").path

    table = Table(title="Throughput model fitted per GPU type (RMSLE; ×: aws time / this type's, fitted)")
    columns = ("model", "type", "rows", "step", "compute", "multi-node extrap.", "noise floor", "compute ×", "sync ×")
    for name in columns:
        table.add_column(name, justify="left" if name in ("model", "type") else "right")
    for model in MODELS:
        profiles = load_typed_profiles(model, data_dir)
        reference = fit_throughput(profile_samples(profiles[REFERENCE_TYPE]))
        local_bsz = min(int(p.placements.local_bsz.max()) for p in profiles.values())
        for gpu_type, profile in profiles.items():
            table.add_row(model, gpu_type, *fit_row(profile, reference, local_bsz))
        table.add_section()
    Console(width=140).print(table)


if __name__ == "__main__":
    main()

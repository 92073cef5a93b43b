"""Speed of the goodput hot path: `optimize` over 10⁴ allocations, and the speedup table the Pollux policy builds
from it for every job every round (`pollux.policies.speedup.speedup_table`: one `optimize` over K = 0…64 on one
node and across nodes, after which any allocation's speedup is an array lookup).

Run: .venv/bin/python -m benchmarks.goodput_speed
"""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from pollux.goodput import GoodputFunction, GradientStats, ThroughputParams
from pollux.policies.base import JobView
from pollux.policies.speedup import speedup_table

# Roughly cifar10's fitted constants; the timings do not depend on the values.
PARAMS = ThroughputParams(0.017, 0.0007, 0.03, 0.0035, 0.12, 0.0026, 2.07)
STATS = GradientStats(sqr=1.0, var=5.0)
REPEATS = 5


def best_of(fn, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    rng = np.random.default_rng(0)
    job = GoodputFunction(PARAMS, STATS, init_batch_size=128)
    replicas = rng.integers(1, 65, 10_000)
    nodes = np.minimum(replicas, rng.integers(1, 17, 10_000))

    table = Table(title="Goodput hot path")
    for name in ("operation", "calls", "seconds", "per second"):
        table.add_column(name, justify="left" if name == "operation" else "right")
    for accumulation in (False, True):
        secs = best_of(lambda acc=accumulation: job.optimize(nodes, replicas, 4096, (32, 1024), acc))
        table.add_row(
            f"optimize, accumulation={accumulation}",
            "10,000 allocations",
            f"{secs:.4f}",
            f"{1e4 / secs:,.0f}",
        )

    view = JobView(
        name="bench",
        application="cifar10",
        submit_time_s=0.0,
        allocation=(0,) * 16,
        num_restarts=0,
        attained_service_gpu_s=0.0,
        requested_gpus=1,
        max_gpus=64,
        init_batch_size=128,
        max_batch_size=4096,
        local_bsz_bounds=(32, 1024),
        throughput_params=PARAMS,
        grad_stats=STATS,
    )
    secs = best_of(lambda: speedup_table(view, 4, 64))
    table.add_row("speedup table of one job (K ≤ 64, 2 shapes)", "1", f"{secs:.4f}", f"{1 / secs:,.0f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()

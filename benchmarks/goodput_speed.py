"""Speed of the goodput hot path: `optimize` over 10⁴ allocations, and `speedup` calls per second.

Run: .venv/bin/python -m benchmarks.goodput_speed
"""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from pollux.goodput import GoodputFunction, GradientStats, SpeedupFunction, ThroughputParams

# Roughly cifar10's fitted constants; the timings do not depend on the values.
PARAMS = ThroughputParams(0.017, 0.0007, 0.03, 0.0035, 0.12, 0.0026, 2.07)
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
    job = GoodputFunction(PARAMS, GradientStats(sqr=1.0, var=5.0), init_batch_size=128)
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

    speedup = SpeedupFunction(job, 1, 4, 4096, (32, 1024), accumulation=True)
    calls = 100_000
    scalar_nodes, scalar_replicas = nodes[:calls].tolist(), replicas[:calls].tolist()

    def scalar_calls() -> None:
        for i in range(calls):
            speedup(scalar_nodes[i % 10_000], scalar_replicas[i % 10_000])

    secs = best_of(scalar_calls, repeats=2)
    table.add_row("speedup, one allocation per call", f"{calls:,}", f"{secs:.4f}", f"{calls / secs:,.0f}")
    big_nodes, big_replicas = np.resize(nodes, calls), np.resize(replicas, calls)
    secs = best_of(lambda: speedup(big_nodes, big_replicas))
    table.add_row("speedup, one array call", f"{calls:,}", f"{secs:.4f}", f"{calls / secs:,.0f}")
    secs = best_of(lambda: SpeedupFunction(job, 1, 4, 4096, (32, 1024), accumulation=True)(1, 64))
    table.add_row("speedup table build (K ≤ 64)", "1", f"{secs:.4f}", f"{1 / secs:,.0f}")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()

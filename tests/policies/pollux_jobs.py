"""For the Pollux policy's tests: adaptive jobs with a fitted model, random rounds of mixed jobs, and checks of a
search layout."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
from policy_jobs import PARAMS, view

from pollux.cluster import Cluster
from pollux.goodput import GradientStats
from pollux.policies.base import JobView
from pollux.policies.search_state import Layout

CLUSTER = Cluster(num_nodes=2, gpus_per_node=4)
NOW = 3600.0


def job(name: str, cluster: Cluster = CLUSTER, **fields) -> JobView:
    """An adaptive job (picks its own batch) with a fitted model and gradient statistics (noise scale 640)."""
    base = view(name, num_nodes=cluster.num_nodes, params=PARAMS, batch_size=None)
    return replace(base, **{"grad_stats": GradientStats(sqr=1.0, var=5.0), **fields})


def random_job(rng: np.random.Generator, name: str, cluster: Cluster) -> JobView:
    """Mostly adaptive jobs; some without a model yet, some with a fixed batch or a minimum; inter-node sync from
    cheap (spreading pays, so distributed jobs compete for nodes) to dear."""
    adaptive = rng.random() < 0.8
    return job(
        name,
        cluster,
        submit_time_s=float(rng.uniform(0, 240)),  # run_rounds starts at 0 s, 60 s a round
        num_restarts=int(rng.integers(0, 4)),
        attained_service_gpu_s=float(rng.uniform(0, 1e4)),
        max_gpus=int(rng.integers(1, 2 * cluster.num_gpus + 1)),
        min_gpus=int(rng.choice([0, 0, 0, 2])),
        batch_size=None if adaptive else int(rng.choice([128, 512, 2048])),
        throughput_params=None
        if rng.random() < 0.2
        else replace(PARAMS, beta_r=float(rng.uniform(0, 0.05)), alpha_n=float(rng.uniform(0.005, 0.3))),
        grad_stats=GradientStats(sqr=1.0, var=float(rng.uniform(0.1, 50))),
    )


def scenarios(seed: int, count: int, max_jobs: int = 12) -> Iterator[tuple[Cluster, list[JobView], int]]:
    rng = np.random.default_rng(seed)
    for _ in range(count):
        cluster = Cluster(num_nodes=int(rng.integers(1, 7)), gpus_per_node=int(rng.integers(1, 7)))
        jobs = [random_job(rng, f"job-{i}", cluster) for i in range(int(rng.integers(1, max_jobs + 1)))]
        yield cluster, jobs, int(rng.integers(0, 2**31))


def snapshot(layout: Layout) -> tuple:
    arrays = (layout.gpus, layout.nodes, layout.home, layout.kept, layout.value, layout.free, layout.spanning)
    return [dict(r) for r in layout.rows], [a.copy() for a in arrays], [set(s) for s in layout.on]


def assert_consistent(layout: Layout) -> None:
    """Everything the layout derives equals what a fresh layout of the same rows derives."""
    fresh = Layout(layout.values, layout.rows)
    rows, arrays, on = snapshot(layout)
    fresh_rows, fresh_arrays, fresh_on = snapshot(fresh)
    assert rows == fresh_rows and on == fresh_on
    for mine, theirs in zip(arrays, fresh_arrays, strict=True):
        np.testing.assert_array_equal(mine, theirs)
    for n in range(len(layout.free)):
        assert layout.free[n] == layout.values.node_gpus[n] - sum(r.get(n, 0) for r in layout.rows)
        assert layout.spanning[n] == sum(1 for r in layout.rows if len(r) > 1 and n in r)

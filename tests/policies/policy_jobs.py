"""Hand-built job views and a tiny round loop for policy tests (no simulator needed)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from pollux.cluster import Allocation, Cluster, NodeGroup
from pollux.engine import Decision
from pollux.goodput import ThroughputParams
from pollux.policies.base import JobView, Policy, PolicyResult

PARAMS = ThroughputParams(alpha_c=0.05, beta_c=0.002, alpha_r=0.02, beta_r=0.002, alpha_n=0.08, beta_n=0.004, gamma=1.5)


def view(
    name: str,
    submit: float = 0.0,
    gpus: int = 1,
    allocation: Allocation | None = None,
    service: float = 0.0,
    num_nodes: int = 2,
    application: str = "cifar10",
    batch_size: int | None = 512,
    params: ThroughputParams | None = None,
    remaining: float | None = None,
    max_gpus: int = 64,
    local_bsz_bounds: tuple[int, int] = (32, 256),
    placement_sensitive: bool = False,
) -> JobView:
    return JobView(
        name=name,
        application=application,
        submit_time_s=submit,
        allocation=allocation if allocation is not None else (0,) * num_nodes,
        num_restarts=0,
        attained_service_gpu_s=service,
        requested_gpus=gpus,
        max_gpus=max_gpus,
        init_batch_size=128,
        max_batch_size=4096,
        local_bsz_bounds=local_bsz_bounds,
        batch_size=batch_size,
        throughput_params=params,
        remaining_steps=remaining,
        placement_sensitive=placement_sensitive,
    )


def random_jobs(rng: np.random.Generator, count: int, cluster: Cluster) -> list[JobView]:
    """Jobs with random submit times, GPU requests (some larger than the cluster), batches and remaining work."""
    jobs = []
    for i in range(count):
        measured = rng.random() < 0.7
        jobs.append(
            view(
                f"job-{i}",
                submit=float(rng.integers(0, 600)),
                gpus=int(rng.integers(1, cluster.num_gpus + 3)),
                num_nodes=cluster.num_nodes,
                application=str(rng.choice(["cifar10", "imagenet", "bert"])),
                batch_size=int(rng.choice([128, 512, 2048])),
                params=replace(PARAMS, beta_r=float(rng.uniform(0, 0.05))) if measured else None,
                remaining=float(rng.integers(1, 20000)),
                max_gpus=int(rng.integers(1, 40)),
                placement_sensitive=bool(rng.random() < 0.3),
            )
        )
    return jobs


def run_rounds(
    policy: Policy, cluster: Cluster, jobs: Sequence[JobView], rng: np.random.Generator, rounds: int, interval_s=60.0
) -> list[tuple[list[JobView], PolicyResult]]:
    """Feed a policy its own decisions back for `rounds` rounds: service grows with GPUs held, remaining work
    shrinks, some jobs finish. Returns each round's views and result."""
    state = {job.name: job for job in jobs}
    history = []
    for r in range(rounds):
        now = r * interval_s
        views = [job for job in state.values() if job.submit_time_s <= now]
        result = policy.optimize(views, cluster, now)
        history.append((views, result))
        for job in views:
            alloc = result.allocations.get(job.name, cluster.empty())
            gpus = sum(alloc)
            remaining = None if job.remaining_steps is None else max(job.remaining_steps - 50 * gpus, 1.0)
            state[job.name] = replace(
                job,
                allocation=alloc,
                attained_service_gpu_s=job.attained_service_gpu_s + gpus * interval_s,
                remaining_steps=remaining,
            )
            if gpus and rng.random() < 0.05:
                del state[job.name]
    return history


def rigid_baselines() -> dict[str, Callable[[], Policy]]:
    """The baselines that keep a job's batch, built with thresholds (and leases) small enough for short test rounds."""
    from pollux.policies.astraea import AstraeaPolicy
    from pollux.policies.fifo import FifoPolicy
    from pollux.policies.optimus import OptimusPolicy
    from pollux.policies.shockwave import ShockwavePolicy
    from pollux.policies.themis import ThemisPolicy
    from pollux.policies.tiresias import TiresiasPolicy

    return {
        "fifo": FifoPolicy,
        "tiresias": lambda: TiresiasPolicy(queue_thresholds_gpu_s=(300.0, 3000.0), starvation_s=600.0),
        "tiresias-gittins": lambda: TiresiasPolicy(
            mode="gittins", gittins_service_samples=[60.0, 600.0, 6000.0], consolidate={"imagenet"}
        ),
        "optimus": OptimusPolicy,
        "astraea": lambda: AstraeaPolicy(lease_s=180.0),
        "themis": lambda: ThemisPolicy(lease_s=180.0),
        "shockwave": ShockwavePolicy,
    }


class Views:
    """A backend that only records decisions: enough for one engine round over fixed views."""

    def __init__(self, cluster: Cluster, jobs: Sequence[JobView]) -> None:
        self.cluster = cluster
        self.jobs = list(jobs)
        self.applied: list[Decision] = []

    def job_views(self, now: float) -> list[JobView]:
        return self.jobs

    def apply(self, decisions: Sequence[Decision], now: float) -> None:
        self.applied.extend(decisions)


# -- rigid jobs (TunedJobs) on clusters of several GPU types, for the peers' tests -------------------------------------
SPEED = {"aws": 1.0, "rtx": 2.0, "dgx-ext": 5.0, "quad": 1.5}  # relative compute speed of each type


def one_step_per_second(job, placement, local_bsz, accum_steps, gpu_type=None) -> float:
    return 1.0


def by_type(job, placement, local_bsz, accum_steps, gpu_type=None) -> float:
    """Compute ∝ examples per GPU ÷ the type's speed, plus a synchronisation that grows with the nodes spanned."""
    return (accum_steps + 1) * local_bsz * 1e-3 / SPEED[gpu_type or "aws"] + 0.02 * len(placement)


def rigid(name: str, cluster: Cluster, gpus: int = 1, remaining: float = 3600.0, **fields) -> JobView:
    """A waiting job of the workload's fixed GPUs and batch (TunedJobs), with `remaining` steps left."""
    return replace(view(name, gpus=gpus, num_nodes=cluster.num_nodes, remaining=remaining), **fields)


def random_typed_cluster(rng: np.random.Generator) -> Cluster:
    kinds = [("aws", 4), ("rtx", 8), ("dgx-ext", 8), ("quad", 4)]
    chosen = rng.choice(len(kinds), size=int(rng.integers(1, 4)), replace=False)
    return Cluster.of_groups([NodeGroup(kinds[k][0], int(rng.integers(1, 4)), kinds[k][1]) for k in sorted(chosen)])


def random_rigid_jobs(rng: np.random.Generator, cluster: Cluster, count: int) -> list[JobView]:
    """Rigid jobs of random sizes, batches, work and arrivals; per-type memory limits, some restricted to a few
    types (sometimes one the cluster lacks)."""
    types = cluster.gpu_types
    jobs = []
    for i in range(count):
        allowed = None if rng.random() < 0.6 else tuple(str(t) for t in rng.choice([*types, "azure"], size=2))
        jobs.append(
            rigid(
                f"job-{i:02d}",
                cluster,
                gpus=int(rng.choice([1, 2, 4, 8, 16])),
                remaining=float(rng.integers(100, 20000)),
                batch_size=int(rng.choice([64, 256, 1024, 4096])),
                gpu_types=allowed,
                local_bsz_bounds_by_type={t: (16, int(rng.choice([64, 128, 512]))) for t in types},
                submit_time_s=float(rng.integers(0, 1200)),
            )
        )
    return jobs

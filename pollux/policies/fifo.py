"""First come, first served with each job's own GPU request: the baseline every other policy is measured against.

Strict and non-preemptive: a running job keeps its GPUs until it finishes; the oldest waiting job starts as soon as
all its GPUs are free anywhere (placed greedily on the nodes with most free GPUs), and no later job may start before
it, even one that would fit now (no backfilling). Jobs that could never fit the cluster do not block the queue. On a
cluster of several GPU types a job takes GPUs of one type it may use (`placement.place_on_one_type`), and "could
never fit" means more GPUs than its largest such type has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from pollux.cluster import Allocation, Cluster, free_gpus
from pollux.policies.base import JobView, Policy, PolicyResult
from pollux.policies.placement import (
    fixed_batches,
    in_submit_order,
    largest_type_gpus,
    never_fits,
    place_on_one_type,
    take,
)


class FifoPolicy(Policy):
    """FIFO by submit time (ties: the order jobs are given in), the workload's GPU count, no preemption."""

    name: ClassVar[str] = "fifo"
    elastic_gpus: ClassVar[bool] = False  # runs each job at its requested GPU count

    @property
    def uses_throughput_model(self) -> bool:
        return False

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        running = {job.name: tuple(job.allocation) for job in jobs if any(g > 0 for g in job.allocation)}
        allocations: dict[str, Allocation] = dict(running)
        free = free_gpus(cluster, allocations)
        reasons: dict[str, str] = {}
        waiting_ahead = 0
        blocked = False
        for job in in_submit_order(jobs):
            if job.name in running:
                continue
            needed = max(job.requested_gpus, 1)
            capacity = largest_type_gpus(cluster, job)
            if needed > capacity:
                reasons[job.name] = f"waiting: needs {needed} GPUs, {never_fits(cluster, capacity)}"
                continue
            alloc = None if blocked else place_on_one_type(cluster, free, job, needed)
            if alloc is None:
                blocked = True
                reasons[job.name] = f"waiting: needs {needed} GPUs, {sum(free)} free; {waiting_ahead} jobs ahead"
                waiting_ahead += 1
                continue
            take(free, alloc)
            allocations[job.name] = alloc
        return PolicyResult(allocations=allocations, reasons=reasons, batch=fixed_batches(jobs, allocations, cluster))

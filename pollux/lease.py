"""Leases: a job that was just started or moved keeps its GPUs long enough to restore and to measure itself.

Why: Pollux's re-allocation factor (T − Rδ)/(T + δ) is near 0 while a job is young, so taking a young job's GPUs
away costs the objective almost nothing, and with many jobs per GPU the search trades them back and forth: jobs
stopped seconds after their start, before they made any progress (issue "Thirty jobs, not three"). Sia's artifact
never preempts a job during its checkpoint-restore; Themis and Astraea give jobs leases. The engine holds every
policy to the same rule, in the simulator and the runtime alike: a job whose allocation began less than its restore
delay plus `min_run_s` ago keeps it (`keep_leases`). Without a lease (`None`), the paper's Pollux.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from pollux.cluster import Allocation, Cluster, validate_allocations
from pollux.defaults import RESTART_DELAY_S
from pollux.errors import AllocationError
from pollux.policies.base import JobView


@dataclass(frozen=True)
class Lease:
    """How long a job keeps an allocation it was given: its restore delay (the view's, else `restore_delay_s`),
    then `min_run_s` of training, enough steps for its agent to measure the new configuration."""

    min_run_s: float
    restore_delay_s: float = float(RESTART_DELAY_S)

    def __post_init__(self) -> None:
        if not self.min_run_s >= 0:
            raise ValueError(f"a lease's min_run_s must be >= 0 seconds, got {self.min_run_s}")

    def ends_at(self, job: JobView) -> float | None:
        """When the job's lease on its allocation ends; None when it holds no GPUs (or never said when it got them)."""
        if job.allocated_at_s is None or not any(job.allocation):
            return None
        restore = self.restore_delay_s if job.restart_delay_s is None else job.restart_delay_s
        return job.allocated_at_s + restore + self.min_run_s


def keep_leases(
    jobs: Sequence[JobView],
    allocations: Mapping[str, Allocation],
    cluster: Cluster,
    now: float,
    lease: Lease,
    avoid_sharing: bool,
    ended: Collection[str] = (),
) -> tuple[dict[str, Allocation], dict[str, str], float | None]:
    """The policy's `allocations`, with every job under lease back on the allocation it holds, and the policy's
    other changes kept where they still fit beside those (capacity, one type per job, interference avoidance);
    a change that no longer fits leaves its job as it was, or waiting if its old GPUs are taken. Also why each
    overruled job keeps or waits, and when the first lease the policy wanted to break ends (a round is due then).
    `ended`: jobs whose leases the quota layer ends early (their tenant borrowed GPUs their owner needs back)."""
    held = {job.name: job.allocation for job in jobs}
    leased = {
        job.name: end for job in jobs if (end := lease.ends_at(job)) is not None and now < end and job.name not in ended
    }
    broken = {name: end for name, end in leased.items() if allocations.get(name, cluster.empty()) != held[name]}
    if not broken:  # the policy left every lease alone
        return dict(allocations), {}, None
    kept: dict[str, Allocation] = {}
    reasons: dict[str, str] = {}
    for name in leased:
        kept[name] = held[name]
    for name, end in broken.items():
        reasons[name] = f"keeps its GPUs: leased for {end - now:.0f} s more (restore, then time to measure)"
    unchanged = [j.name for j in jobs if j.name not in kept and allocations.get(j.name) == held[j.name]]
    changed = [name for name in allocations if name not in kept and name not in unchanged and name in held]
    for name in unchanged + changed:
        if _fits(cluster, {**kept, name: allocations[name]}, avoid_sharing):
            kept[name] = allocations[name]
        elif any(held[name]) and _fits(cluster, {**kept, name: held[name]}, avoid_sharing):
            kept[name] = held[name]
            reasons[name] = "keeps its GPUs: the ones it was given are leased to another job"
        else:
            reasons[name] = "waits: the GPUs it was given are leased to another job"
    return {name: alloc for name, alloc in kept.items() if any(alloc)}, reasons, min(broken.values())


def _fits(cluster: Cluster, allocations: Mapping[str, Allocation], avoid_sharing: bool) -> bool:
    try:
        validate_allocations(cluster, allocations, avoid_sharing=avoid_sharing)
    except AllocationError:
        return False
    return True

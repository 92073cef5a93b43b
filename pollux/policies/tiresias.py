"""Tiresias (Gu et al., NSDI'19): least attained service in two dimensions (GPUs × time), without job-size hints.

Discretized 2D-LAS (§3.2): a job's queue is the number of service thresholds its attained GPU-seconds have
crossed; queues run in priority order and, within one, in the order jobs entered it. A job runs only when all its
requested GPUs are free, placed greedily on the nodes with most free GPUs; the decision is remade every round, so a
job that falls behind is preempted (and restarted later). 2D-Gittins (§3.2) orders jobs inside a queue by their
Gittins index instead, computed from the distribution of past jobs' GPU-time. Consolidated placement (§3.3) is kept
for the models that need it; all others go wherever GPUs are free.

On a cluster of several GPU types a job runs on one type it may use: the placement rule picks the type
(`placement.place_on_one_type`), and a job larger than every such type never counts against the others.

The defaults are the Pollux artifact's: two queues split at 16 GPU-hours, no starvation promotion, greedy placement.
As there, a job that keeps running keeps its nodes, a waiting job later in the order may start when an earlier one
does not fit (only the GPU count is checked), and a demoted (or promoted) job joins the back of its new queue.

State: unlike the other baselines this policy remembers, per job name, the queue a job is in, when it entered it,
the service it had when last promoted, and when it last ran. Queue order and starvation need that history, which
no single view holds. State of jobs that are no longer shown is dropped; the same sequence of calls gives the same
decisions.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from pollux.cluster import Allocation, Cluster, free_gpus
from pollux.errors import SpecError
from pollux.policies.base import JobView, Policy, PolicyResult
from pollux.policies.placement import (
    fewest_nodes,
    fixed_batches,
    in_submit_order,
    kept_allocations,
    largest_type_gpus,
    never_fits,
    place_on_one_type,
    take,
)

TiresiasMode = Literal["las", "gittins"]


class GittinsIndex:
    """Gittins index of a job that has attained service a, from an empirical distribution of total service S:

        index(a) = sup_Δ  P(S − a ≤ Δ | S > a) / E[min(S − a, Δ) | S > a]

    the chance of finishing within the next Δ per unit of service spent trying (Tiresias §3.2, after Gittins).
    For a discrete distribution the ratio only peaks at Δ = s − a for a sample s > a (between two samples the
    numerator is flat and the denominator grows), so the supremum is an exact maximum over those points, computed
    with prefix sums over the distinct sample values. 0 once a exceeds every sample (nothing left to predict).
    """

    def __init__(self, service_samples: Sequence[float], cache_size: int = 8192) -> None:
        samples = np.asarray(service_samples, dtype=np.float64)
        if samples.size == 0 or not np.all(np.isfinite(samples)) or np.any(samples < 0):
            raise SpecError("gittins_service_samples must be a non-empty list of finite GPU-seconds >= 0")
        self._values, counts = np.unique(samples, return_counts=True)
        self._cum_count = np.concatenate(([0], np.cumsum(counts)))
        self._cum_service = np.concatenate(([0.0], np.cumsum(counts * self._values)))
        self._cached = functools.lru_cache(maxsize=cache_size)(self._compute)

    def __call__(self, attained_gpu_s: float) -> float:
        return self._cached(float(attained_gpu_s))

    def _compute(self, attained: float) -> float:
        start = int(np.searchsorted(self._values, attained, side="right"))
        if start == len(self._values):
            return 0.0
        tail_total = self._cum_count[-1] - self._cum_count[start]
        done = self._cum_count[start + 1 :] - self._cum_count[start]  # samples finishing within Δ_k, per k
        spent_done = self._cum_service[start + 1 :] - self._cum_service[start] - attained * done
        delta = self._values[start:] - attained
        expected = spent_done + delta * (tail_total - done)  # n · E[min(S − a, Δ_k) | S > a]
        return float(np.max(done / expected))


@dataclass(slots=True)
class _QueueState:
    """What Tiresias remembers about one job between rounds."""

    queue: int
    entered_s: float  # when it joined its current queue: order within the queue
    service_base_gpu_s: float  # attained service at its last promotion; queues count service since then
    last_ran_s: float


class TiresiasPolicy(Policy):
    """Discretized 2D-LAS (or 2D-Gittins) over the workload's GPU requests, preempting between rounds."""

    name: ClassVar[str] = "tiresias"
    elastic_gpus: ClassVar[bool] = False  # runs each job at its requested GPU count

    @property
    def uses_throughput_model(self) -> bool:
        return False

    def __init__(
        self,
        queue_thresholds_gpu_s: Sequence[float] = (16 * 3600.0,),
        starvation_s: float | None = None,
        mode: TiresiasMode = "las",
        gittins_service_samples: Sequence[float] | None = None,
        consolidate: Collection[str] = (),
        consolidate_sensitive: bool = False,
    ) -> None:
        """`queue_thresholds_gpu_s`: increasing GPU-seconds at which a job drops one queue (K−1 values, K queues).
        `starvation_s`: a job in a lower queue waiting this long since it last ran returns to the top queue with
        its service count restarted (Tiresias' promotion); None disables it, as in the artifact.
        `mode`: "las" (FIFO within a queue) or "gittins" (highest Gittins index first within a queue, from
        `gittins_service_samples`, GPU-seconds of past jobs, e.g. the Philly trace's gpu_time).
        `consolidate`: applications placed on the fewest possible nodes or not at all; `consolidate_sensitive`
        also does so for every job whose view says `placement_sensitive` (off by default: the artifact places
        every job greedily).
        """
        thresholds = [float(t) for t in queue_thresholds_gpu_s]
        if any(t <= 0 for t in thresholds) or any(b <= a for a, b in itertools.pairwise(thresholds)):
            raise SpecError(f"tiresias queue_thresholds_gpu_s must be positive and increasing, got {thresholds}")
        if starvation_s is not None and starvation_s < 0:
            raise SpecError(f"tiresias starvation_s must be >= 0 or None, got {starvation_s}")
        if mode not in ("las", "gittins"):
            raise SpecError(f"tiresias mode must be 'las' or 'gittins', got {mode!r}")
        if mode == "gittins" and gittins_service_samples is None:
            raise SpecError("tiresias mode 'gittins' needs gittins_service_samples (GPU-seconds of past jobs)")
        self._thresholds = thresholds
        self._starvation_s = starvation_s
        self._gittins = GittinsIndex(gittins_service_samples or ()) if mode == "gittins" else None
        self._consolidate = frozenset(consolidate)
        self._consolidate_sensitive = consolidate_sensitive
        self._state: dict[str, _QueueState] = {}

    def queue_of(self, service_gpu_s: float) -> int:
        """Number of thresholds a service count has reached (0 = top queue)."""
        return bisect.bisect_right(self._thresholds, service_gpu_s)

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        names = {job.name for job in jobs}
        self._state = {name: st for name, st in self._state.items() if name in names}
        ordered = in_submit_order(jobs)
        for job in ordered:
            self._update(job, now)
        service = {job.name: job.attained_service_gpu_s - self._state[job.name].service_base_gpu_s for job in jobs}
        index = {name: self._gittins(s) for name, s in service.items()} if self._gittins is not None else {}
        position = {job.name: i for i, job in enumerate(ordered)}

        def priority(job: JobView) -> tuple[int, float, float, int]:
            st = self._state[job.name]
            return st.queue, -index.get(job.name, 0.0), st.entered_s, position[job.name]

        ordered.sort(key=priority)
        reasons: dict[str, str] = {}
        chosen = self._admit(ordered, cluster, reasons)
        allocations = self._place(ordered, chosen, cluster, reasons)
        info: dict[str, object] = {"queue": {job.name: self._state[job.name].queue for job in jobs}}
        if index:
            info["gittins_index"] = index
        return PolicyResult(
            allocations=allocations, reasons=reasons, batch=fixed_batches(jobs, allocations, cluster), info=info
        )

    def _update(self, job: JobView, now: float) -> None:
        """Enter a new job, demote one whose service crossed a threshold, promote one that starved."""
        running = any(g > 0 for g in job.allocation)
        st = self._state.get(job.name)
        if st is None:
            ran = running or job.attained_service_gpu_s > 0
            st = _QueueState(self.queue_of(job.attained_service_gpu_s), now, 0.0, now if ran else job.submit_time_s)
            self._state[job.name] = st
            return
        if running:
            st.last_ran_s = now
        queue = self.queue_of(job.attained_service_gpu_s - st.service_base_gpu_s)
        if queue != st.queue:
            st.queue, st.entered_s = queue, now
        starving = self._starvation_s is not None and now - st.last_ran_s >= self._starvation_s
        if st.queue > 0 and not running and starving:
            st.queue, st.entered_s, st.service_base_gpu_s = 0, now, job.attained_service_gpu_s

    def _admit(self, ordered: list[JobView], cluster: Cluster, reasons: dict[str, str]) -> dict[str, int]:
        """Who runs: in priority order, every job whose GPU count still fits in the cluster's total (and in one GPU
        type it may use)."""
        left = cluster.num_gpus
        chosen: dict[str, int] = {}
        for job in ordered:
            needed = max(job.requested_gpus, 1)
            capacity = largest_type_gpus(cluster, job)
            if needed > capacity and capacity < cluster.num_gpus:
                queue = self._state[job.name].queue
                reasons[job.name] = f"waiting in queue {queue}: needs {needed} GPUs, {never_fits(cluster, capacity)}"
            elif needed <= left:
                chosen[job.name] = needed
                left -= needed
            else:
                queue = self._state[job.name].queue
                reasons[job.name] = (
                    f"waiting in queue {queue}: needs {needed} GPUs, "
                    f"{left} free after {len(chosen)} higher-priority jobs"
                )
        return chosen

    def _place(
        self, ordered: list[JobView], chosen: dict[str, int], cluster: Cluster, reasons: dict[str, str]
    ) -> dict[str, Allocation]:
        """Where they run: a chosen job already running on its GPUs stays; others are placed in priority order."""
        allocations = kept_allocations(ordered, cluster, chosen)
        free = free_gpus(cluster, allocations)
        for job in ordered:
            if job.name not in chosen or job.name in allocations:
                continue
            needed = chosen[job.name]
            alloc = place_on_one_type(cluster, free, job, needed, consolidated=self._consolidated(job))
            if alloc is None:
                queue = self._state[job.name].queue
                if self._consolidated(job):
                    nodes = fewest_nodes(needed, cluster.node_gpus)
                    reasons[job.name] = (
                        f"waiting in queue {queue}: needs {needed} GPUs on {nodes} node(s) (consolidated), "
                        f"{sum(free)} free GPUs are spread over more nodes"
                    )
                else:
                    reasons[job.name] = (
                        f"waiting in queue {queue}: needs {needed} GPUs of one GPU type, {sum(free)} free are "
                        "spread over several types"
                    )
                continue
            take(free, alloc)
            allocations[job.name] = alloc
        return allocations

    def _consolidated(self, job: JobView) -> bool:
        return job.application in self._consolidate or (self._consolidate_sensitive and job.placement_sensitive)


class TiresiasGittinsPolicy(TiresiasPolicy):
    """Tiresias' 2D-Gittins variant as a policy of its own name, fed the service distribution of past jobs."""

    name: ClassVar[str] = "tiresias-gittins"
    inputs: ClassVar[tuple[str, ...]] = ("gittins_service_samples",)

    def __init__(self, gittins_service_samples: Sequence[float], **options: Any) -> None:
        super().__init__(mode="gittins", gittins_service_samples=gittins_service_samples, **options)

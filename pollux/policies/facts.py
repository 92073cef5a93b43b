"""What a backend knows of a job, and the one rule that turns it into the `JobView` a policy sees.

The simulator (`pollux.sim.backend`) and the runtime (`pollux.runtime.backend`) each fill a `JobFacts` from what they
hold (a simulated job; a spec, the store and the agent's report); `job_view` applies the rules that must not differ
between the two, such as how many GPUs a job may be given (docs/design.md, "Exploration bound").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from operator import attrgetter

from pollux.cluster import Allocation
from pollux.goodput import GradientStats, ThroughputParams
from pollux.policies.base import MAX_ELASTIC_GPUS, JobView, exploration_bound
from pollux.tenants import DEFAULT_TENANT


@dataclass(frozen=True)
class JobFacts:
    """One active job as its backend knows it: its request, what it has explored and measured, its models and
    bounds per GPU type. Per-type maps are empty where the backend does not tell types apart."""

    name: str
    application: str
    submit_time_s: float
    allocation: Allocation  # GPUs per node held now; all zeros while waiting
    num_restarts: int  # re-allocations after the first start (R of the re-allocation factor)
    attained_service_gpu_s: float
    requested_gpus: int  # the user's GPU count
    init_batch_size: int  # M0
    max_batch_size: int
    local_bsz_bounds: tuple[int, int]
    batch_size: int | None = None  # the fixed total batch; None: the job adapts it
    batch_by_policy: bool = False  # the policy picks the batch (elastic-DP): bounded by memory, not exploration
    max_replicas_run: int = 0  # the most GPUs it has run on (what it has measured)
    gpu_cap: int | None = None  # the user's (or the workload's) most GPUs; None: no cap of theirs
    min_gpus: int = 0
    throughput_params: ThroughputParams | None = None  # of the type it runs (or ran) on
    grad_stats: GradientStats | None = None
    remaining_steps: float | None = None
    placement_sensitive: bool = False
    gpu_types: tuple[str, ...] | None = None
    throughput_params_by_type: Mapping[str, ThroughputParams] = field(default_factory=dict)
    local_bsz_bounds_by_type: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    run_time_by_type_s: Mapping[str, float] = field(default_factory=dict)
    single_gpu_throughput_by_type: Mapping[str, float] = field(default_factory=dict)
    restart_delay_s: float | None = None  # its own checkpoint-restore delay, where measured
    allocated_at_s: float | None = None  # when its current allocation began (its last start or move)
    tenant: str = DEFAULT_TENANT
    gpus_per_replica_by_type: Mapping[str, int] = field(default_factory=dict)  # a pipelined job's k per type
    # How far along it is, as its agent reports it: statistical progress (M0-steps), epochs done (fractional), and
    # the epochs its training loop declares (None: none declared).
    m0_steps: float = 0.0
    epochs_done: float = 0.0
    epochs: int | None = None


def gpu_bound(
    batch_size: int | None,
    batch_by_policy: bool,
    max_replicas_run: int,
    max_batch_size: int,
    min_local_bsz: int,
    gpu_cap: int | None = None,
    min_gpus: int = 0,
    explore: bool = True,
) -> int:
    """The most GPUs a job may be given: an adaptive job twice what it has run on (it learns its scaling step by
    step; not with `explore` off), a fixed batch at least the smallest per-GPU batch per GPU, a policy-chosen batch
    what memory allows; then the user's cap, and never below the user's minimum or 1."""
    if batch_by_policy or (batch_size is None and not explore):
        bound = min(MAX_ELASTIC_GPUS, max_batch_size // min_local_bsz)
    elif batch_size is None:
        bound = exploration_bound(max_replicas_run, max_batch_size, min_local_bsz)
    else:
        bound = max(batch_size // min_local_bsz, 1)
    if gpu_cap is not None:
        bound = min(bound, gpu_cap)
    return max(bound, min_gpus, 1)


def remaining_m0_steps(m0_steps: float, epochs_done: float, epochs: int | None) -> float | None:
    """The statistical progress (M0-steps) a job has left: what its epochs so far took, per epoch, times the epochs
    it has left of those its loop declares. None before its first progress or where it declares no epochs."""
    if epochs is None or epochs_done <= 0 or m0_steps <= 0:
        return None
    return m0_steps / epochs_done * max(epochs - epochs_done, 0.0)


def job_view(facts: JobFacts) -> JobView:
    """The policy's view of a job: its facts, with its GPU bound (a pipelined job's bound is in replicas, from
    replicas run and its per-replica batch: shown as GPUs of its largest replica, `JobView.max_gpus_on`), that bound
    without exploration where it explores, and the work it has left (`remaining_m0_steps`)."""
    largest = max(facts.gpus_per_replica_by_type.values(), default=1)
    terms = (
        facts.batch_size,
        facts.batch_by_policy,
        facts.max_replicas_run,
        facts.max_batch_size,
        facts.local_bsz_bounds[0],
        facts.gpu_cap,
        facts.min_gpus,
    )
    explores = facts.batch_size is None and not facts.batch_by_policy
    shown = dict(zip(_SHOWN, _read_shown(facts), strict=True))
    return JobView(
        **shown,
        max_gpus=largest * gpu_bound(*terms),
        remaining_m0_steps=remaining_m0_steps(facts.m0_steps, facts.epochs_done, facts.epochs),
        explored_gpus=facts.max_replicas_run,
        max_gpus_unexplored=largest * gpu_bound(*terms, explore=False) if explores else None,
    )


# The view's fields that are facts as they are (every one but those `job_view` derives), named once: a simulation
# builds a view per active job per round (a quarter of a FIFO simulation's time went to `fields` and `getattr`).
_DERIVED = ("max_gpus", "remaining_m0_steps", "explored_gpus", "max_gpus_unexplored")
_SHOWN = tuple(f.name for f in fields(JobView) if f.name not in _DERIVED)
_read_shown = attrgetter(*_SHOWN)

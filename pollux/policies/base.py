"""The one interface every policy implements, and the frozen views it is given.

A policy is a pure function of what it is shown: `optimize(jobs, cluster, now)` reads `JobView`s, returns a
`PolicyResult`, mutates nothing, reads no clock. The same policy object runs in the simulator and the runtime.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pollux.cluster import Allocation, Cluster
from pollux.defaults import EXPLORATION_FACTOR
from pollux.goodput import BatchConfig, GoodputFunction, GradientStats, ThroughputParams
from pollux.tenants import DEFAULT_TENANT

# Who chooses a job's batch size: the user (the workload's fixed batch; FIFO, Tiresias, Optimus), the job itself by
# its goodput model (Pollux's agent), or the policy, which returns it in `PolicyResult.batch` (elastic-DP).
BatchOwner = Literal["user", "job", "policy"]

MAX_ELASTIC_GPUS = 64  # the artifact caps an elastic job at 64 GPUs


def exploration_bound(max_replicas_run: int, max_batch_size: int, min_local_bsz: int) -> int:
    """How many GPUs an adaptive job may be given: twice the most it has run on (at least 1), so the scheduler
    never trusts its model far beyond what the job measured; at most 64, and at most what its max batch allows at
    the smallest per-GPU batch (docs/design.md, "Goodput model"). Shared by the simulator and the runtime."""
    explored = max(EXPLORATION_FACTOR * max_replicas_run, 1)
    return min(explored, MAX_ELASTIC_GPUS, max(max_batch_size // min_local_bsz, 1))


@dataclass(frozen=True)
class JobView:
    """What a policy may know about one active (submitted, unfinished) job."""

    name: str
    application: str
    submit_time_s: float
    allocation: Allocation  # GPUs per node held now; all zeros while waiting
    num_restarts: int  # allocation changes after the first start
    attained_service_gpu_s: float  # GPUs × seconds run so far (Tiresias' 2D service)
    requested_gpus: int  # the user's GPU count, kept by fixed-size policies
    max_gpus: int  # hard bound, exploration bound included (twice the GPUs it has run on)
    init_batch_size: int  # M0
    max_batch_size: int
    local_bsz_bounds: tuple[int, int]
    batch_size: int | None = None  # fixed total batch; None when the job adapts it
    min_gpus: int = 0
    throughput_params: ThroughputParams | None = None  # fitted on what the job ran; None before its first step
    grad_stats: GradientStats | None = None
    remaining_steps: float | None = None  # steps left at its fixed batch, where known (Optimus' oracle)
    placement_sensitive: bool = False  # its profile says consolidation matters (Tiresias)
    # On clusters of several GPU types (docs/design.md, "Heterogeneous clusters"). A job runs on one type at a time;
    # `throughput_params` and `local_bsz_bounds` above describe the type it runs on now (or last ran on).
    gpu_types: tuple[str, ...] | None = None  # the types it may run on (profiles, memory, the user's choice); None: any
    throughput_params_by_type: Mapping[str, ThroughputParams] = field(default_factory=dict)  # fitted per type run
    local_bsz_bounds_by_type: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # per-GPU batch per type
    run_time_by_type_s: Mapping[str, float] = field(default_factory=dict)  # seconds it has held GPUs of each type
    # Examples per second on one GPU of each type at one per-GPU batch: a cheap profile (Sia: < 20 GPU-seconds per
    # type), whose ratios bootstrap the model of a type the job has not run on (`pollux.goodput.scaled_params`).
    single_gpu_throughput_by_type: Mapping[str, float] = field(default_factory=dict)
    restart_delay_s: float | None = None  # what a restart costs it (its checkpoint-restore), where known
    allocated_at_s: float | None = None  # when its current allocation began (its last start or move); None: waiting
    tenant: str = DEFAULT_TENANT  # the team it belongs to (`pollux.tenants`)
    # A hybrid-parallel job (docs/design.md, "Hybrid-parallel jobs"): the GPUs of one data-parallel replica on each
    # type it may use, a pipeline of k GPUs on one node; its batch bounds, throughput model and `max_gpus // k` count
    # replicas, not GPUs. Empty: one GPU per replica on every type (a data-parallel job).
    gpus_per_replica_by_type: Mapping[str, int] = field(default_factory=dict)
    # Statistical progress (M0-steps) it has left, estimated from the epochs its training loop declares and what
    # those done took (`pollux.policies.facts.remaining_m0_steps`); None where it is not known.
    remaining_m0_steps: float | None = None
    # The most GPUs (replicas of a pipelined job) it has run on, and `max_gpus` without its exploration bound (memory
    # and max batch, 64, the user's cap); None where the bound has no exploration term (a fixed or policy-chosen
    # batch). A policy that explores faster (`max_gpus_exploring`) reads them.
    explored_gpus: int = 0
    max_gpus_unexplored: int | None = None

    @property
    def adaptive(self) -> bool:
        return self.batch_size is None

    @property
    def pipelined(self) -> bool:
        """Whether a replica is more than one GPU on some type: every allocation must be whole replicas, each
        replica's GPUs on one node (`pollux.policies.replicas`)."""
        return any(k > 1 for k in self.gpus_per_replica_by_type.values())

    def gpus_per_replica(self, gpu_type: str | None) -> int:
        """GPUs of one replica on `gpu_type` (None: a one-type cluster's only type): 1 for a data-parallel job."""
        if gpu_type is None:
            return max(self.gpus_per_replica_by_type.values(), default=1)
        return self.gpus_per_replica_by_type.get(gpu_type, 1)

    def max_gpus_on(self, gpu_type: str | None) -> int:
        """The most GPUs it may be given on `gpu_type`: `max_gpus`, save for a pipelined job, whose bound is in
        replicas (`max_gpus` holds it times its largest replica) and so in GPUs differs by type."""
        if not self.pipelined:
            return self.max_gpus
        largest = max(self.gpus_per_replica_by_type.values())
        return self.max_gpus // largest * self.gpus_per_replica(gpu_type)

    def max_gpus_exploring(self, factor: float) -> int:
        """`max_gpus` with the exploration bound at `factor` times the GPUs (replicas) it has run on instead of
        twice, within the rest of its bound; its view's bound where that has no exploration term."""
        if self.max_gpus_unexplored is None:
            return self.max_gpus
        largest = max(self.gpus_per_replica_by_type.values(), default=1)
        explored = largest * max(math.floor(factor * self.explored_gpus), 1)
        return max(min(explored, self.max_gpus_unexplored), largest * self.min_gpus, largest)

    def may_run_on(self, gpu_type: str) -> bool:
        return self.gpu_types is None or gpu_type in self.gpu_types

    def bounds_on(self, gpu_type: str) -> tuple[int, int]:
        """Per-GPU batch bounds on `gpu_type` (its memory), where they differ from `local_bsz_bounds`."""
        return self.local_bsz_bounds_by_type.get(gpu_type, self.local_bsz_bounds)

    def age_s(self, now: float) -> float:
        return max(now - self.submit_time_s, 0.0)

    def goodput_fn(self) -> GoodputFunction | None:
        """The job's goodput model, or None while nothing has been measured."""
        if self.throughput_params is None:
            return None
        stats = self.grad_stats if self.grad_stats is not None else GradientStats(0.0, 0.0)
        return GoodputFunction(self.throughput_params, stats, self.init_batch_size)


@dataclass(frozen=True)
class PolicyResult:
    """Allocations for the jobs a policy runs (others wait), why each waiting job waits, and optional batch
    choices and diagnostics."""

    allocations: Mapping[str, Allocation]
    reasons: Mapping[str, str] = field(default_factory=dict)
    batch: Mapping[str, BatchConfig] = field(default_factory=dict)
    info: Mapping[str, Any] = field(default_factory=dict)


class Policy(ABC):
    """Decides, every round, how many GPUs on which nodes each active job holds."""

    name: ClassVar[str]
    batch_owner: ClassVar[BatchOwner] = "user"
    # Which `PolicySettings` fields (`pollux.policies.registry`) the constructor takes: what a command-line flag
    # may set, the same way in the simulator and the runtime.
    settings: ClassVar[tuple[str, ...]] = ()
    # Knowledge the constructor takes when the caller has it: "step_time" (true step times, only a simulator has
    # them: the artifact's Optimus reads its profiles), "gittins_service_samples" (the Philly GPU-time distribution).
    inputs: ClassVar[tuple[str, ...]] = ()
    # Whether the policy changes a job's GPU count (elastic) or only runs it at its requested size (rigid).
    elastic_gpus: ClassVar[bool] = True
    # A policy whose rounds have a length of their own (Gavel's 360 s) says so; None: the caller's interval.
    round_s: ClassVar[int | None] = None
    # Whether it tells GPU types apart: a type-unaware policy's jobs learn one throughput model from every type they
    # run on, with the batch bounds of the cluster's first type (the Sia paper's heterogeneity-unaware Pollux).
    gpu_type_aware: ClassVar[bool] = True
    # Whether it searches within the tenants' GPU budgets itself (`optimize_within`); any other policy runs behind the
    # quota layer's admission and enforcement (`pollux.quota`).
    tenant_aware: ClassVar[bool] = False
    # Whether it allocates hybrid-parallel jobs (`JobView.pipelined`) whole replicas, each on one node; the engine
    # refuses such a job, in one line, under a policy that does not (`pollux.policies.replicas`).
    whole_replicas: ClassVar[bool] = False

    @property
    def uses_throughput_model(self) -> bool:
        """Whether the policy reads `JobView.throughput_params` (backends skip refitting for those that don't)."""
        return True

    @property
    def avoids_sharing(self) -> bool:
        """Whether its allocations never put two distributed jobs on one node; the engine checks it, in the
        simulator and the runtime alike."""
        return False

    @abstractmethod
    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        """Return the allocations for this round. Must not mutate `jobs`."""

    def optimize_within(
        self, jobs: Sequence[JobView], cluster: Cluster, now: float, budgets: Mapping[str, Mapping[str, int]]
    ) -> PolicyResult:
        """Allocations that give no tenant more GPUs of a type than `budgets[tenant][type]`; only a policy that is
        `tenant_aware` implements it."""
        raise NotImplementedError(f"policy {self.name} is not tenant-aware")

"""Pollux that does not tell GPU types apart: the heterogeneity-unaware Pollux the Sia paper (Jayaram Subramanya et
al., SOSP'23) compares against, to show what ignoring GPU types costs (docs/design.md, "Pollux,
heterogeneity-unaware").

As in the Sia artifact, every real node is cut into virtual nodes of 4 GPUs (an 8-GPU node into two; a node of
another size into as many whole 4-GPU nodes as fit, plus one with the rest), all of one type, and Pollux's own
search (`PolluxPolicy`, same settings) runs on that virtual cluster with the job views as the backend gives them to
a type-unaware policy (`Policy.gpu_type_aware`: one throughput model learned on every type, the first type's batch
bounds). Its virtual allocations are mapped back to real nodes; a job given GPUs of several types keeps only the
type holding most of them (ties: the faster type, `TYPE_RANK`), and the rest stay idle this round.

Virtual allocations of the last round are remembered, as the artifact does: a job whose real allocation is still
what its remembered virtual one maps to is shown to Pollux on those same virtual nodes, so a job Pollux keeps keeps
its GPUs exactly. Any other allocation is split onto the virtual nodes of its real nodes, best fit first.

Interference avoidance acts on the virtual nodes, as in the artifact, and does not hold on the real ones: two
distributed jobs on the two halves of the same 8-GPU nodes are, for Pollux, on distinct nodes. So
`avoids_sharing` is False (enforcing it after mapping back would idle GPUs that the paper's baseline used); a
simulator's interference slowdown applies to such jobs as to any others.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from pollux.cluster import Allocation, Cluster, NodeGroup
from pollux.defaults import RESTART_DELAY_S
from pollux.policies.base import JobView, PolicyResult
from pollux.policies.pollux import PolluxPolicy

VIRTUAL_NODE_GPUS = 4
# Which type a job split across types keeps when two hold as many of its GPUs: the faster, as in the Sia paper
# (A100 > V100 > Quadro RTX 6000 > RTX 2080Ti > T4); types not listed rank last, in the cluster's order.
TYPE_RANK: Mapping[str, int] = {"dgx-ext": 5, "dgx": 5, "azure": 4, "quad": 3, "rtx": 2, "aws": 1}


@dataclass(frozen=True)
class VirtualCluster:
    """A real cluster's nodes cut into virtual nodes of at most 4 GPUs, all of the real cluster's first type."""

    real: Cluster
    virtual: Cluster
    owner: tuple[int, ...]  # the real node each virtual node is part of

    @classmethod
    def of(cls, real: Cluster) -> VirtualCluster:
        sizes: list[int] = []
        owner: list[int] = []
        for node, gpus in enumerate(real.node_gpus):
            whole, rest = divmod(gpus, VIRTUAL_NODE_GPUS)
            parts = [VIRTUAL_NODE_GPUS] * whole + ([rest] if rest else [])
            sizes += parts
            owner += [node] * len(parts)
        groups = [NodeGroup(real.gpu_types[0], len(list(run)), size) for size, run in itertools.groupby(sizes)]
        return cls(real, Cluster.of_groups(groups), tuple(owner))

    def to_real(self, virtual: Allocation) -> Allocation:
        """GPUs per real node: the sum over its virtual nodes."""
        gpus = np.bincount(self.owner, weights=virtual, minlength=self.real.num_nodes)
        return tuple(int(g) for g in gpus)

    def to_virtual(self, jobs: Sequence[JobView], remembered: Mapping[str, Allocation]) -> dict[str, Allocation]:
        """Every job's real allocation on the virtual nodes: its remembered one where that still maps to it, else
        split real node by real node (larger jobs first), onto the virtual node that fits it best, else onto those
        with most free GPUs. A view that does not match the cluster counts as holding nothing."""
        free = np.array(self.virtual.node_gpus)
        owner = np.array(self.owner)
        placed: dict[str, Allocation] = {}
        for job in jobs:
            before = remembered.get(job.name)
            if before is not None and len(before) == len(owner) and self.to_real(before) == tuple(job.allocation):
                placed[job.name] = before
                free -= before
        rest = [job for job in jobs if job.name not in placed]
        for job in sorted(rest, key=lambda job: (-sum(job.allocation), job.name)):
            alloc = np.zeros(len(self.owner), dtype=np.int64)
            if len(job.allocation) == self.real.num_nodes:
                for node, gpus in enumerate(job.allocation):
                    if gpus <= 0:
                        continue
                    parts = np.flatnonzero(owner == node)
                    holds = parts[free[parts] >= gpus]
                    if holds.size:
                        alloc[holds[np.argmin(free[holds])]] = gpus
                        continue
                    for part in parts[np.argsort(-free[parts], kind="stable")]:
                        alloc[part] = min(gpus, max(int(free[part]), 0))
                        gpus -= int(alloc[part])
                free -= alloc
            placed[job.name] = tuple(int(g) for g in alloc)
        return placed

    def keep_one_type(self, virtual: Allocation) -> Allocation:
        """The virtual allocation restricted to the real GPU type holding most of it (ties: `TYPE_RANK`, then the
        cluster's order of types)."""
        types = self.real.gpu_types
        node_type = [self.real.node_types[n] for n in self.owner]
        held = {t: sum(g for g, nt in zip(virtual, node_type, strict=True) if nt == t) for t in types}
        keep = max(types, key=lambda t: (held[t], TYPE_RANK.get(t, 0), -types.index(t)))
        return tuple(g if nt == keep else 0 for g, nt in zip(virtual, node_type, strict=True))


class PolluxUnawarePolicy(PolluxPolicy):
    """Pollux's search on 4-GPU virtual nodes of one type; each job then keeps one real type (module docstring)."""

    name: ClassVar[str] = "pollux-unaware"
    gpu_type_aware: ClassVar[bool] = False
    tenant_aware: ClassVar[bool] = False  # the Sia paper's baseline searches its virtual nodes behind the quota layer
    whole_replicas: ClassVar[bool] = False  # one model for every type cannot count replicas of a size per type
    settings: ClassVar[tuple[str, ...]] = ("p", "restart_delay_s", "avoid_interference", "discount_starts")

    def __init__(
        self,
        p: float = -1.0,
        restart_delay_s: float = float(RESTART_DELAY_S),
        avoid_interference: bool = True,
        discount_starts: bool = True,
    ) -> None:
        """The settings of the paper's `PolluxPolicy` (its jobs' remaining work not weighed); `avoid_interference`
        acts on the virtual nodes."""
        super().__init__(p, restart_delay_s, avoid_interference, discount_starts, remaining_work=False)
        self._virtual: dict[str, Allocation] = {}  # last round's virtual allocations, after the type drop

    @property
    def avoids_sharing(self) -> bool:
        """False: interference avoidance holds on the virtual nodes only (module docstring)."""
        return False

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        split = VirtualCluster.of(cluster)
        current = split.to_virtual(jobs, self._virtual)
        result = super().optimize([replace(job, allocation=current[job.name]) for job in jobs], split.virtual, now)
        kept = {name: split.keep_one_type(alloc) for name, alloc in result.allocations.items()}
        self._virtual = kept
        idle = {name: sum(result.allocations[name]) - sum(alloc) for name, alloc in kept.items()}
        return PolicyResult(
            allocations={name: split.to_real(alloc) for name, alloc in kept.items()},
            reasons=result.reasons,
            info={**result.info, "idle_gpus": {name: gpus for name, gpus in idle.items() if gpus > 0}},
        )

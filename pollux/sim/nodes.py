"""A simulated cloud's nodes: how many are billed, which of them have booted, and the round that resizes them.

`pollux.autoscale` decides how many nodes the cluster should have; this module carries it out on the virtual
clock. Nodes asked for are billed at once and usable `boot_time_s` later, at the first round after they boot
(a policy places jobs only at rounds). Nodes given back go at once: booting ones first, then the ready nodes with
the fewest GPUs in use (`pollux.autoscale.release_order`); a job holding GPUs on a node given back is checkpointed at
the round's boundary, where the simulator already stands, and the policy places it again in the same round, paying
the restart delay like any other move. No job is cut mid-step.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass

from pollux.autoscale import Autoscaler, AutoscaleSettings, kept_nodes, with_nodes
from pollux.cluster import Cluster
from pollux.policies.base import Policy
from pollux.sim.backend import SimBackend


@dataclass(frozen=True)
class NodePoint:
    """The nodes after the autoscaling step of the round at `time_s`: billed from then until the next round."""

    time_s: float
    nodes_ready: int
    nodes_booting: int
    utility: float | None  # the window's mean utility when it was full this round (pollux.autoscale)

    @property
    def nodes_billed(self) -> int:
        return self.nodes_ready + self.nodes_booting

    def as_row(self) -> dict[str, object]:
        return asdict(self) | {"nodes_billed": self.nodes_billed}


class NodePool:
    """Nodes of one kind: `ready` ones the policy may use, and booting ones with the time each becomes usable."""

    def __init__(self, ready: int, boot_time_s: float) -> None:
        self.ready = ready
        self.boot_time_s = boot_time_s
        self.booting: list[float] = []  # ready times, ascending

    @property
    def billed(self) -> int:
        return self.ready + len(self.booting)

    def request(self, nodes: int, now: float) -> int:
        """Hold `nodes` nodes from `now`: boot the missing ones, or cancel booting ones (the latest first) and then
        give back ready ones. Returns how many ready nodes must go."""
        for _ in range(nodes - self.billed):
            bisect.insort(self.booting, now + self.boot_time_s)
        excess = self.billed - nodes
        cancelled = min(max(excess, 0), len(self.booting))
        del self.booting[len(self.booting) - cancelled :]
        release = max(excess - cancelled, 0)
        self.ready -= release
        return release

    def arrive(self, now: float) -> int:
        """Move the nodes booted by `now` to ready; returns how many."""
        done = bisect.bisect_right(self.booting, now)
        del self.booting[:done]
        self.ready += done
        return done


class ElasticNodes:
    """The simulator's autoscaling step, between a round's progress and its scheduling: ask the `Autoscaler`, then
    grow or shrink the backend's cluster as `NodePool` allows."""

    def __init__(self, cluster: Cluster, settings: AutoscaleSettings, boot_time_s: float) -> None:
        self.autoscaler = Autoscaler(settings)
        self.pool = NodePool(settings.min_nodes, boot_time_s)
        self.start = with_nodes(cluster, settings.min_nodes)  # the artifact starts at the minimum
        self.largest = with_nodes(cluster, settings.max_nodes)
        self.points: list[NodePoint] = []

    def round(self, backend: SimBackend, policy: Policy, now: float) -> NodePoint:
        """Observe the allocation that just ran, resize, and record the nodes billed from `now`."""
        cluster = backend.cluster
        decision = self.autoscaler.step(backend.job_views(now), cluster, now, policy, self.pool.billed)
        released = self.pool.request(decision.nodes, now)
        arrived = self.pool.arrive(now)
        if released or arrived:
            allocations = [job.allocation for job in backend.jobs if job.allocation and not job.done]
            kept = kept_nodes(cluster, allocations, cluster.num_nodes - released)
            backend.resize(with_nodes(cluster, self.pool.ready), kept, now)
        point = NodePoint(now, self.pool.ready, len(self.pool.booting), decision.utility)
        self.points.append(point)
        return point

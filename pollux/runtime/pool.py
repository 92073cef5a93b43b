"""An elastic pool of Ray nodes: Pollux sizes the cluster (Pollux §5.4) and Ray's autoscaler starts and stops nodes.

Every round the `Autoscaler` (`pollux.autoscale`, the simulator's rule, per GPU type) observes the round's
allocation on the pool and says how many nodes of each type to hold; Ray is asked for them (`RayAutoscaler`), and
the pool becomes the alive nodes, up to that many per type. A job on a node that left the pool (released by this
decision, or lost) checkpoints and waits to be placed again. Built only with a `RayLauncher`.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from pollux.autoscale import Autoscaler, AutoscaleSettings
from pollux.cluster import Cluster
from pollux.policies.base import JobView, Policy
from pollux.runtime.autoscale import RayAutoscaler
from pollux.runtime.backend import RuntimeBackend
from pollux.runtime.lifecycle import JobLifecycle
from pollux.runtime.ray_launcher import RayLauncher
from pollux.runtime.store import StateStore

LOG = logging.getLogger("pollux.runtime")


class ElasticPool:
    """Sizes the Ray pool per GPU type each round, and keeps the running jobs' allocations on it current."""

    def __init__(
        self,
        ray_autoscaler: RayAutoscaler,
        launcher: RayLauncher,
        store: StateStore,
        lifecycle: JobLifecycle,
        backend: RuntimeBackend,
        window_rounds: int,
    ) -> None:
        self.ray_autoscaler = ray_autoscaler
        self.launcher = launcher
        self.store = store
        self.lifecycle = lifecycle
        self.backend = backend
        # idle nodes are billed, so with no job every type goes to its minimum
        types = ray_autoscaler.node_types
        self.rule = Autoscaler(AutoscaleSettings.per_type(types, window_rounds=window_rounds, idle_to_minimum=True))

    @property
    def largest(self) -> Cluster:
        """The most the pool may grow to."""
        return self.ray_autoscaler.largest

    def step(self, now: float, policy: Policy) -> bool:
        """Size the pool for this round; whether any node is in it to schedule on."""
        launcher, requested = self.launcher, self.ray_autoscaler.requested
        pool = launcher.cluster if launcher.has_nodes else None
        views = self.views_on(pool, now)
        held = None if requested is None else {t: requested.get(t, 0) for t in self.largest.gpu_types}
        decision = self.rule.step(views, pool, now, policy, held)
        if decision.resized and decision.nodes_by_type != (held or {}):
            LOG.info("autoscale: %s", decision.reason)
        self.ray_autoscaler.request(decision.nodes_by_type)
        remap = launcher.refresh(keep=decision.nodes_by_type)
        if remap is not None:
            LOG.info("pool: %s", launcher.cluster.describe() if launcher.has_nodes else "no GPU nodes")
            self.renumber(remap)
        if not launcher.has_nodes:
            for view in views:
                self.lifecycle.job(view.name).reason = "waiting for Ray's autoscaler to start nodes"
        return launcher.has_nodes

    def views_on(self, pool: Cluster | None, now: float) -> list[JobView]:
        """The active jobs as the autoscaler sees them: bounded by the largest cluster allowed (what they could grow
        to), holding their GPUs on the pool (nothing while no node is up)."""
        views, attained = [], self.store.attained_services(now)
        for state in self.store.jobs(include_finished=False):
            backing_off = state.status == "pending" and now < self.lifecycle.job(state.name).not_before
            if state.cancel_requested or backing_off:
                continue
            service_gpu_s = attained.get(state.name, 0.0)
            view = self.backend.view(replace(state, allocation=()), self.largest, now, service_gpu_s)
            running = pool is not None and state.status == "running" and len(state.allocation) == pool.num_nodes
            held = tuple(state.allocation) if running else pool.empty() if pool is not None else ()
            views.append(replace(view, allocation=held))
        return views

    def renumber(self, remap: dict[int, int]) -> None:
        """The pool changed: running jobs get their allocations in the new node order; one whose node is gone is
        stopped (it checkpoints; on a lost node it was killed with it) and waits to be placed again."""
        running = [s for s in self.store.jobs(include_finished=False) if s.status == "running" and s.allocation]
        gone = [s.name for s in running if any(g and n not in remap for n, g in enumerate(s.allocation))]
        codes = self.lifecycle.stop(gone) if gone else {}
        for name, code in codes.items():
            reason = "its node left the pool; resumes from its checkpoint"
            self.lifecycle.settle(name, code, self.lifecycle.clock(), stop_reason=reason)
        nodes = len(self.launcher.node_ids)
        for state in running:
            if state.name in codes:
                continue
            allocation = [0] * nodes
            for n, gpus in enumerate(state.allocation):
                if gpus:
                    allocation[remap[n]] = gpus
            self.store.set_allocation(state.name, tuple(allocation))

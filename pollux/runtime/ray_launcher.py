"""The Ray backend's launcher: the GPU nodes of a Ray cluster are the pool, one Ray actor per worker.

The launcher is the `Launcher` face of a few parts, each with one job and its own design notes:

* `pollux.runtime.ray_nodes`: the node pool (which Ray nodes offer the GPU resource, their types and numbering,
  which are alive, which are left out after a failed reservation, and how the pool follows Ray's autoscaler);
* `pollux.runtime.ray_start`: starting a worker group (one placement group pinned to the allocation's nodes, one
  actor per rank, wired like `torchrun`; one live group per job, even across a scheduler crash);
* `pollux.runtime.ray_worker`: the actor that runs one rank's command on its node, dying with it;
* `pollux.runtime.ray_group`: a started group (polling, stopping, killing it; a lost node's `EXIT_NODE_LOST`).

Assumptions: a shared filesystem (the job's log, checkpoints and report, `POLLUX_*` paths, and its working
directory are the same paths on every node, as any multi-node training expects). The launcher holds its one lock
only to check and to record: waiting for Ray (a previous group's removal, a reservation, the actors' start) leaves
the other jobs' calls free to run meanwhile.

Ray is imported lazily, so `import pollux.runtime` works without it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from pollux.cluster import Cluster
from pollux.defaults import STOP_GRACE_S
from pollux.errors import LaunchError, UnknownJobError
from pollux.runtime.launcher import LaunchRequest, WorkerInfo
from pollux.runtime.processes import reap_processes
from pollux.runtime.ray_group import EXIT_LOST, RayGroup
from pollux.runtime.ray_nodes import NodePool, RayNode, node_gpu_type, pool_cluster, pool_nodes
from pollux.runtime.ray_start import GroupStarter

__all__ = ["EXIT_LOST", "RayLauncher", "RayNode", "node_gpu_type", "pool_cluster", "pool_nodes"]


class RayLauncher:
    """Starts worker groups on the nodes of a Ray cluster that offer `gpu_resource`; see the module docstring.

    The pool is the alive nodes offering the resource when the launcher starts (`pool_nodes`), each with its own
    GPU count and type; `refresh` takes in nodes that joined or left since (`allow_empty`: the pool may start
    empty, for a cluster whose autoscaler starts every GPU node). Thread-safe: the service's loop and its HTTP
    handlers may call it at once.
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        gpu_resource: str = "GPU",
        stop_grace_s: float = STOP_GRACE_S,
        namespace: str = "pollux",
        placement_timeout_s: float = 20.0,
        gpu_type_resources: Mapping[str, str] | None = None,
        allow_empty: bool = False,
    ) -> None:
        import ray

        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=address, namespace=namespace, log_to_driver=False)
        self._stop_grace_s = stop_grace_s
        self._pool = NodePool(gpu_resource, gpu_type_resources)
        if not self._pool.has_nodes and not allow_empty:
            if self._owns_ray:
                ray.shutdown()
            raise LaunchError(
                f"no alive node of the Ray cluster offers the resource {gpu_resource!r}: start the nodes with it, "
                f"e.g. ray start --resources='{{\"{gpu_resource}\": 4}}' (or pick gpu_resource to match the cluster)"
            )
        self._starter = GroupStarter(
            gpu_resource, stop_grace_s, placement_timeout_s, self._pool.alive_ids, self._leave_out
        )
        self._host = ray.util.get_node_ip_address()
        self._groups: dict[str, RayGroup] = {}
        self._launching: set[str] = set()  # jobs whose launch waits on Ray outside the lock
        self._lock = threading.RLock()
        self._closed = False

    @property
    def cluster(self) -> Cluster:
        """The pool as the policy sees it: the Ray nodes offering the GPU resource, grouped by type and size.
        Only for a pool with nodes: see `has_nodes`."""
        return self._pool.cluster

    @property
    def has_nodes(self) -> bool:
        """Whether the pool holds any node (an autoscaled cluster may have none)."""
        return self._pool.has_nodes

    @property
    def node_ids(self) -> list[str]:
        """The Ray node id of each pool node, in pool order (node i of an allocation is `node_ids[i]`)."""
        return self._pool.node_ids

    @property
    def nodes(self) -> list[RayNode]:
        return self._pool.nodes

    def alive_nodes(self) -> list[RayNode]:
        """Every alive node of the Ray cluster offering the GPU resource now, in pool order."""
        return self._pool.alive_nodes()

    def refresh(self, keep: Mapping[str, int] | None = None) -> dict[int, int] | None:
        """Make the pool the alive nodes, at most `keep[type]` of each type named there (the ones hosting worker
        groups first, then by node id: the others are left idle for Ray's autoscaler to release). Returns None when
        the pool did not change, else the new index of each old pool node still in it; a node missing from the
        map is gone (dead, or released): whatever ran there must be stopped."""
        with self._lock:
            remap = self._pool.refresh(self._busy(), keep)
            if remap is not None:
                for group in self._groups.values():  # workers keep naming their node, for `reap` and the next refresh
                    group.workers = [
                        WorkerInfo(w.rank, remap.get(w.node, -1), w.pid, w.host, w.start_ticks) for w in group.workers
                    ]
            return remap

    def launch(self, request: LaunchRequest) -> list[WorkerInfo]:
        """Reserve the allocation's GPUs on exactly its nodes, then start one worker per GPU; nothing of the job
        is left behind (actors, placement group) if any part fails. An exited, unforgotten group is forgotten; a
        dead driver's group of the job is waited for, up to the stop grace period (`pollux.runtime.ray_start`).

        The launcher's lock is held only to check and to record: waiting for Ray (a previous group's removal, the
        reservation, the actors' start) leaves `poll`, `stop` and `kill` of other jobs free to run meanwhile."""
        with self._lock:
            nodes = self._check_launchable(request)
            pool_ids = self._pool.node_ids
            node_ids = [pool_ids[i] for i in nodes]
            self._launching.add(request.job)
        try:
            group = self._starter.start(request, nodes, node_ids)
            with self._lock:
                if self._closed:
                    group.release()
                    raise LaunchError(f"job {request.job}: the Ray launcher was shut down while it launched")
                self._groups[request.job] = group
            return list(group.workers)
        finally:
            with self._lock:
                self._launching.discard(request.job)

    def _check_launchable(self, request: LaunchRequest) -> list[int]:
        """Under the lock: refuse what cannot start now, forget the job's exited group; the pool node of each rank."""
        if self._closed:
            raise LaunchError(f"job {request.job}: the Ray launcher was shut down")
        if request.job in self._launching:
            raise LaunchError(f"job {request.job}: it is being launched already", transient=True)
        old = self._groups.get(request.job)
        if old is not None:
            if old.running():
                raise LaunchError(
                    f"job {request.job}: its workers are still running (stop it and poll first)", transient=True
                )
            self._groups.pop(request.job).release()
        if not request.command:
            raise LaunchError(f"job {request.job}: the command is empty (give the program to run and its arguments)")
        return self._pool.rank_nodes(request.job, request.allocation)

    def _busy(self) -> set[str]:
        """The Ray nodes on which a group of ours holds GPUs."""
        return {node_id for g in self._groups.values() for node_id in g.node_ids}

    def _leave_out(self, node_ids: list[str]) -> None:
        """A reservation on `node_ids` timed out: quarantine those where no group of ours holds GPUs (on the
        others the GPUs are merely busy, not the node unresponsive)."""
        with self._lock:
            self._pool.quarantine(sorted(set(node_ids) - self._busy()))

    def poll(self, job: str) -> int | None:
        """None while any worker runs; then the group's exit code (`pollux.runtime.ray_group.RayGroup.poll`)."""
        with self._lock:
            return self._group(job).poll(self._pool.alive_ids)

    def stop(self, job: str) -> None:
        """Ask each actor to SIGTERM its worker; returns without waiting for them."""
        with self._lock:
            self._group(job).stop()

    def kill(self, job: str) -> None:
        """SIGKILL every running worker (its helpers too), then kill the actors; `poll` reports 137 for them."""
        with self._lock:
            self._group(job).kill()

    def forget(self, job: str) -> None:
        """Remove an exited group's actors and placement group, so that its GPUs are free for the next launch."""
        with self._lock:
            if self._group(job).running():
                raise RuntimeError(f"job {job}: cannot forget a running worker group (stop or kill it, then poll)")
            self._groups.pop(job).release()

    def workers(self, job: str) -> list[WorkerInfo]:
        """The job's workers as launched, to store so that a later scheduler can `reap` them."""
        with self._lock:
            return list(self._group(job).workers)

    def reap(self, workers: list[WorkerInfo]) -> int:
        """Stop the recorded workers on this host that still run (`pollux.runtime.processes.reap_processes`). On other
        hosts Ray already did the work: it kills a dead driver's actors, and their workers get SIGTERM from the
        kernel (PDEATHSIG)."""
        return reap_processes(workers, self._host, self._stop_grace_s)

    def shutdown(self) -> None:
        """Remove what is left of this launcher's actors and placement groups (a worker still running gets SIGTERM
        from the kernel when its actor dies), and disconnect from Ray if this launcher connected."""
        import ray

        with self._lock:
            if self._closed:
                return
            self._closed = True
            for group in self._groups.values():
                group.release()
            self._groups.clear()
            if self._owns_ray:
                ray.shutdown()

    def _group(self, job: str) -> RayGroup:
        group = self._groups.get(job)
        if group is None:
            raise UnknownJobError(f"job {job}: the Ray launcher has no worker group for it")
        return group

"""Starting one job's worker group on Ray: reserve its GPUs on exactly its nodes, then one actor per rank.

A worker group is one placement group with a bundle per GPU, each bundle pinned to its node with a label selector
on Ray's built-in `ray.io/node-id` label: the reservation is atomic (all or nothing) and lands exactly where the
policy's allocation says. Inside each bundle an actor (`pollux.runtime.ray_worker`) starts one rank's training
command, wired like `torchrun` (`rank_wiring`: `RANK` in node order, then local; `MASTER_ADDR` is the rank-0 node's
IP, `MASTER_PORT` a port rank 0's actor found free on that node).

* One live group per job, even across a scheduler crash: a job's placement group is named `pollux-<job>` and its
  actors `pollux-<job>-<rank>` in the launcher's namespace. Ray removes a dead driver's groups once their actors
  are gone; until then a launch of the job waits (up to the stop grace period), then fails as transient.
  (`LaunchRequest.lock_path` is the local launcher's device; this one does not use it.)
* A lost node never blocks a launch long: a reservation looks every `RESERVE_SLICE_S` whether its nodes are still
  alive and gives up after the placement timeout, telling the launcher which nodes did not answer (it leaves them
  out of the pool for a while: `pollux.runtime.ray_nodes`).
* GPUs may be Ray's own `GPU` resource (the actor takes `num_gpus=1`, Ray sets `CUDA_VISIBLE_DEVICES`) or a custom
  resource such as `pollux_gpu`, declared with `ray start --resources='{"pollux_gpu": 4}'`, so that a CPU-only
  cluster can be scheduled as if it had GPUs (each worker then sees no GPU: `CUDA_VISIBLE_DEVICES=""`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pollux.cluster import Allocation, num_nodes_used
from pollux.errors import LaunchError
from pollux.runtime.launcher import LaunchRequest, WorkerInfo
from pollux.runtime.ray_group import AliveIds, RayGroup, kill_actors, release_group
from pollux.runtime.ray_worker import WorkerActor, WorkerStarted

if TYPE_CHECKING:
    from ray.actor import ActorHandle
    from ray.util.placement_group import PlacementGroup

NODE_ID_LABEL = "ray.io/node-id"  # the label Ray gives every node, its hex node id
GROUP_PREFIX = "pollux-"  # a job's placement group is GROUP_PREFIX + job; its actors GROUP_PREFIX + job-rank
ACTOR_CALL_TIMEOUT_S = 120.0  # starting a worker actor means starting a Python process on a possibly busy node
RESERVE_SLICE_S = 1.0  # a reservation looks this often whether its nodes are still alive
REMOVAL_POLL_S = 0.2  # how often a launch looks whether a previous driver's group of the job is gone


def rank_wiring(
    allocation: Allocation, nodes: Sequence[int], master_addr: str, master_port: int, gpu_resource: str
) -> list[dict[str, Any]]:
    """Each rank's keyword arguments of `pollux.runtime.processes.worker_env`, as torchrun wires them: `nodes` is
    the pool node of each rank (node order, then local)."""
    return [
        {
            "rank": rank,
            "local_rank": nodes[:rank].count(node),
            "world_size": len(nodes),
            "local_world_size": allocation[node],
            "master_addr": master_addr,
            "master_port": master_port,
            "num_nodes": num_nodes_used(allocation),
            # a virtual GPU: the worker must not grab a real one; a `GPU` one is the one Ray gave the actor
            "cuda_visible_devices": None if gpu_resource == "GPU" else "",
        }
        for rank, node in enumerate(nodes)
    ]


@dataclass(frozen=True)
class GroupStarter:
    """Starts a job's worker group on given pool nodes; nothing of the job is left behind if any part fails.

    `alive_ids` is the pool's view of the nodes Ray lists alive; `on_reservation_timeout` gets the Ray node ids of
    a reservation that timed out (the launcher leaves the unresponsive ones out of the pool)."""

    gpu_resource: str
    stop_grace_s: float
    placement_timeout_s: float
    alive_ids: AliveIds
    on_reservation_timeout: Callable[[list[str]], None]

    def start(self, request: LaunchRequest, nodes: list[int], node_ids: list[str]) -> RayGroup:
        """Wait for a dead driver's group of the job to go, reserve one bundle per rank (`nodes`: each rank's pool
        node, on Ray node `node_ids[rank]`), then start one actor and its worker per rank. Raises `LaunchError`."""
        from ray.exceptions import GetTimeoutError, RayActorError

        actors: list[ActorHandle] = []
        pg: PlacementGroup | None = None
        try:
            self._await_previous_group(request.job)
            pg = self._reserve(request.job, nodes, node_ids)
            actors = self._create_actors(request.job, pg, len(nodes))
            workers = self._start_workers(request, nodes, node_ids, actors)
            return RayGroup(request.job, pg, actors, workers, node_ids)
        except ValueError as exc:  # an actor name still taken: a previous driver's actor not cleaned up yet
            release_group(actors, pg)
            raise LaunchError(
                f"job {request.job}: an actor of its previous worker group is still alive ({exc}); retry later",
                transient=True,
            ) from exc
        except (GetTimeoutError, RayActorError) as exc:
            release_group(actors, pg)
            raise LaunchError(f"job {request.job}: its worker actors did not start ({exc})", transient=True) from exc
        except BaseException:
            release_group(actors, pg)
            raise

    def _await_previous_group(self, job: str) -> None:
        """Wait up to the stop grace period for a placement group of the job that is not this launcher's (a dead
        driver's: its workers got SIGTERM and may be checkpointing) to be removed; Ray removes it once that
        driver's actors are gone. Still there → a transient `LaunchError`."""
        from ray.util.placement_group import get_placement_group, placement_group_table

        name = GROUP_PREFIX + job
        deadline = time.monotonic() + self.stop_grace_s
        while True:
            try:
                state = placement_group_table(get_placement_group(name)).get("state")
            except ValueError:  # no group of that name (a removed one is no longer found by name)
                return
            if state == "REMOVED":
                return
            if time.monotonic() >= deadline:
                raise LaunchError(
                    f"job {job}: its previous worker group still holds the Ray placement group {name!r} ({state}; "
                    "started by a scheduler that died, it is probably checkpointing); retry later",
                    transient=True,
                )
            time.sleep(REMOVAL_POLL_S)

    def _reserve(self, job: str, nodes: list[int], node_ids: list[str]) -> PlacementGroup:
        """One bundle per rank, pinned to its node by label: all of them or none, within the placement timeout.
        A node Ray declares dead meanwhile ends the wait at once (module docstring)."""
        from ray.exceptions import RaySystemError
        from ray.util.placement_group import placement_group, remove_placement_group

        try:
            pg = placement_group(
                [{self.gpu_resource: 1} for _ in nodes],
                strategy="PACK",
                name=GROUP_PREFIX + job,
                bundle_label_selector=[{NODE_ID_LABEL: node_id} for node_id in node_ids],
            )
        except RaySystemError as exc:  # the name was taken since `_await_previous_group` looked
            raise LaunchError(
                f"job {job}: Ray refused its placement group ({exc}); retry later", transient=True
            ) from exc
        deadline = time.monotonic() + self.placement_timeout_s
        while not pg.wait(max(min(RESERVE_SLICE_S, deadline - time.monotonic()), 0.0)):
            wanted = {i: nodes.count(i) for i in sorted(set(nodes))}
            dead = sorted(set(node_ids) - self.alive_ids(True))
            if dead:
                remove_placement_group(pg)
                raise LaunchError(
                    f"job {job}: Ray node(s) {', '.join(dead)} died while Ray reserved {self.gpu_resource} per node "
                    f"{wanted}",
                    transient=True,
                )
            if time.monotonic() >= deadline:
                remove_placement_group(pg)
                self.on_reservation_timeout(sorted(set(node_ids)))
                raise LaunchError(
                    f"job {job}: Ray could not reserve {self.gpu_resource} per node {wanted} within "
                    f"{self.placement_timeout_s:g} s (held by other jobs or other Ray users, or the node is "
                    "unresponsive; see `ray status`)",
                    transient=True,
                )
        return pg

    def _create_actors(self, job: str, pg: PlacementGroup, ranks: int) -> list[ActorHandle]:
        """One actor per rank, in its rank's bundle, holding one GPU (Ray's or the custom resource)."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        worker_cls = ray.remote(WorkerActor)
        gpu_options: dict[str, Any] = (
            {"num_gpus": 1} if self.gpu_resource == "GPU" else {"resources": {self.gpu_resource: 1}}
        )
        actors: list[ActorHandle] = []
        try:
            for rank in range(ranks):
                strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=rank)
                options = {"num_cpus": 0, "max_restarts": 0, "scheduling_strategy": strategy, **gpu_options}
                actor: Any = worker_cls.options(name=f"{GROUP_PREFIX}{job}-{rank}", **options).remote()
                actors.append(actor)
        except BaseException:
            kill_actors(actors)  # the ones already created: the caller only knows of a complete list
            raise
        return actors

    def _start_workers(
        self, request: LaunchRequest, nodes: list[int], node_ids: list[str], actors: list[ActorHandle]
    ) -> list[WorkerInfo]:
        """Check each actor sits on its rank's node, wire the ranks like torchrun and start their commands."""
        import ray

        places: list[tuple[str, str]] = ray.get([a.where.remote() for a in actors], timeout=ACTOR_CALL_TIMEOUT_S)
        for rank, (node_id, _) in enumerate(places):
            if node_id != node_ids[rank]:
                raise LaunchError(
                    f"job {request.job}: Ray placed rank {rank} on node {node_id}, not on pool node {nodes[rank]} "
                    f"({node_ids[rank]}): this Ray version ignores bundle label selectors"
                )
        port: int = ray.get(actors[0].free_port.remote(), timeout=ACTOR_CALL_TIMEOUT_S)  # type: ignore[assignment]
        wiring = rank_wiring(request.allocation, nodes, places[0][1], port, self.gpu_resource)
        refs = [
            actor.start.remote(
                list(request.command),
                {**request.env, "POLLUX_RAY_NODE_ID": places[rank][0]},
                wiring[rank],
                str(request.cwd),
                str(request.log_dir),
            )
            for rank, actor in enumerate(actors)
        ]
        started: list[WorkerStarted] = ray.get(refs, timeout=ACTOR_CALL_TIMEOUT_S)
        for rank, s in enumerate(started):
            if s.error is not None:
                raise LaunchError(f"job {request.job}: rank {rank} on node {nodes[rank]}: {s.error}")
        return [
            WorkerInfo(rank=rank, node=nodes[rank], pid=s.pid, host=places[rank][1], start_ticks=s.start_ticks)
            for rank, s in enumerate(started)
        ]

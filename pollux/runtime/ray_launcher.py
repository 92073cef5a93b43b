"""The Ray backend's launcher: the GPU nodes of a Ray cluster are the pool, one Ray actor per worker.

A worker group is one placement group with a bundle per GPU, each bundle pinned to its node with a label selector
on Ray's built-in `ray.io/node-id` label: the reservation is atomic (all or nothing) and lands exactly where the
policy's allocation says. Inside each bundle an actor starts one rank's training command as a subprocess, wired
like `torchrun` (`RANK` in node order, then local; `MASTER_ADDR` is the rank-0 node's IP, `MASTER_PORT` a port
rank 0's actor found free on that node), its output written by itself into its rank's log file
(`pollux.runtime.joblog`): a worker never depends on its actor or the scheduler being alive to print.

Assumptions and guarantees:

* A shared filesystem: the job's log, checkpoints and report (`POLLUX_*` paths), and its working directory, are
  the same paths on every node, as any multi-node training expects.
* The training subprocess dies with its actor (`PR_SET_PDEATHSIG = SIGTERM`): when the scheduler's driver dies,
  Ray kills its (non-detached) actors, their workers get SIGTERM, checkpoint and exit.
* One live group per job, even across a scheduler crash: a job's placement group is named `pollux-<job>` and its
  actors `pollux-<job>-<rank>` in the launcher's namespace. Ray removes a dead driver's groups once their actors
  are gone; until then a launch of the job waits (up to the stop grace period), then fails as transient.
  (`LaunchRequest.lock_path` is the local launcher's device; this one does not use it.)
* An actor that dies under a running worker (it was killed) counts as a crash with code 137 (`EXIT_LOST`,
  "killed"), so the scheduler retries the job from its last checkpoint.
* A node lost under a running group (Ray declared it dead) is not the job's crash: the group's code is then
  `EXIT_NODE_LOST`, whatever its other workers exited with (a rank whose peer vanished fails in its next
  collective, often before Ray's health checks declare the node dead: a crashed group with an actor that died or
  did not answer waits, still "running", up to `_VERDICT_WAIT_S` for Ray's word), and the scheduler resumes the job
  from its last checkpoint on nodes that are alive. A lost node never blocks the caller long: a poll waits at most
  `_POLL_WAIT_S` for the actors' answers and a kill `_KILL_ANSWER_S`; a reservation looks every
  `_RESERVE_SLICE_S` whether its nodes are still alive and gives up after the placement timeout; a node that
  failed a reservation (and where no group of ours holds GPUs: then it is merely busy) is left out of the pool,
  and refused, for `_QUARANTINE_S` or until Ray declares it dead, unless a group of ours runs on it.
* Each node's GPU type comes from Ray: a resource named in `gpu_type_resources` (`--gpu-type-resource
  RESOURCE=TYPE`), else the node's `ray.io/accelerator-type` label, else its `accelerator_type:<NAME>` resource (Ray
  sets both on nodes with GPUs it recognises), in the short names of `pollux.runtime.gpu_types`; else "gpu". The
  pool is one node group per (type, GPUs per node), nodes of a group in node-id order.
* The pool may change (cloud auto-scaling: `refresh`): nodes that joined are added, nodes that left or that the
  scheduler releases are dropped, and `refresh` tells the old index of each node kept, so that the service can
  renumber what runs and stop (checkpoint) what ran on a node no longer in the pool.
* GPUs may be Ray's own `GPU` resource (the actor takes `num_gpus=1`, Ray sets `CUDA_VISIBLE_DEVICES`) or a custom
  resource such as `pollux_gpu`, declared with `ray start --resources='{"pollux_gpu": 4}'`, so that a CPU-only
  cluster can be scheduled as if it had GPUs (each worker then sees no GPU: `CUDA_VISIBLE_DEVICES=""`).

Ray is imported lazily, so `import pollux.runtime` works without it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pollux.cluster import Cluster, NodeGroup, num_nodes_used
from pollux.errors import LaunchError, UnknownJobError
from pollux.runtime.gpu_types import UNKNOWN_GPU_TYPE, type_from_device_name
from pollux.runtime.joblog import open_rank_log
from pollux.runtime.launcher import EXIT_NODE_LOST, EXIT_STOPPED, LaunchRequest, WorkerInfo
from pollux.runtime.processes import (
    GroupExit,
    die_with_parent,
    exit_code,
    process_start_ticks,
    reap_processes,
    resolve_command,
    worker_env,
)

if TYPE_CHECKING:
    from ray.actor import ActorHandle
    from ray.util.placement_group import PlacementGroup

LOG = logging.getLogger(__name__)

EXIT_LOST = 137  # a worker whose actor died (node lost, actor killed): reported as if SIGKILLed
NODE_ID_LABEL = "ray.io/node-id"  # the label Ray gives every node, its hex node id
ACCELERATOR_LABEL = "ray.io/accelerator-type"  # the label Ray gives a node whose GPU model it recognises
ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"  # Ray's resource naming a node's GPU model (1 per node)
GROUP_PREFIX = "pollux-"  # a job's placement group is GROUP_PREFIX + job; its actors GROUP_PREFIX + job-rank
_ACTOR_CALL_TIMEOUT_S = 120.0  # starting a worker actor means starting a Python process on a possibly busy node
_POLL_WAIT_S = 2.0  # how long a poll waits for the actors' answers; one not in by then is asked again next poll
_ALIVE_TTL_S = 1.0  # how long Ray's list of alive nodes is reused (each poll of each running job reads it)
_RESERVE_SLICE_S = 1.0  # a reservation looks this often whether its nodes are still alive
_QUARANTINE_S = 60.0  # a node that failed a reservation is left out this long, unless Ray declares it dead sooner
_VERDICT_WAIT_S = 30.0  # how long a crashed group with an unreachable actor waits for Ray to declare its node dead
_KILL_WAIT_S = 2.0  # how long an actor waits for its SIGKILLed worker to be collected
_KILL_ANSWER_S = 2 * _KILL_WAIT_S + 1.0  # how long a kill waits for the actors' answers; one not in is unreachable
_REMOVAL_POLL_S = 0.2  # how often a launch looks whether a previous driver's group of the job is gone


@dataclass(frozen=True)
class RayNode:
    """One Ray node of the pool: its id, address, GPUs and their type."""

    node_id: str
    ip: str
    gpus: int
    gpu_type: str


def node_gpu_type(node: Mapping[str, Any], gpu_type_resources: Mapping[str, str]) -> str:
    """A node's GPU type from what Ray says about it (`ray.nodes()` entry): module docstring, first rule first."""
    resources: Mapping[str, float] = node.get("Resources", {})
    for resource, gpu_type in gpu_type_resources.items():
        if resources.get(resource, 0) > 0:
            return gpu_type
    label = (node.get("Labels") or {}).get(ACCELERATOR_LABEL)
    if label:
        return type_from_device_name(label)
    named = sorted(
        r.removeprefix(ACCELERATOR_RESOURCE_PREFIX) for r in resources if r.startswith(ACCELERATOR_RESOURCE_PREFIX)
    )
    return type_from_device_name(named[0]) if named else UNKNOWN_GPU_TYPE


def pool_nodes(
    nodes: Sequence[Mapping[str, Any]], gpu_resource: str, gpu_type_resources: Mapping[str, str]
) -> list[RayNode]:
    """The alive nodes offering `gpu_resource`, in pool order: by type (in the order of their names), GPUs per
    node, then node id, so that each node group of the pool's `Cluster` is contiguous."""
    found = [
        RayNode(
            n["NodeID"],
            n["NodeManagerAddress"],
            int(n["Resources"][gpu_resource]),
            node_gpu_type(n, gpu_type_resources),
        )
        for n in nodes
        if n["Alive"] and n["Resources"].get(gpu_resource, 0) >= 1
    ]
    return sorted(found, key=lambda n: (n.gpu_type, n.gpus, n.node_id))


def pool_cluster(nodes: Sequence[RayNode]) -> Cluster:
    """The pool as the policy sees it: one node group per run of nodes of one type and size."""
    groups: list[NodeGroup] = []
    for node in nodes:
        last = groups[-1] if groups else None
        if last is not None and (last.gpu_type, last.gpus_per_node) == (node.gpu_type, node.gpus):
            groups[-1] = NodeGroup(last.gpu_type, last.num_nodes + 1, last.gpus_per_node)
        else:
            groups.append(NodeGroup(node.gpu_type, 1, node.gpus))
    return Cluster.of_groups(groups)


@dataclass(frozen=True)
class _Started:
    """A worker actor's answer to `start`: the subprocess's pid and start time, or why it could not start."""

    pid: int = 0
    start_ticks: int = 0
    error: str | None = None


class _WorkerActor:
    """Runs one rank's training command on the node Ray placed this actor on (inside the job's bundle).

    A plain class made a Ray actor by `ray.remote` at launch (Ray stays a lazy import). Ray runs a synchronous
    actor's methods on its main thread, which lives as long as the actor: the right thread to fork a worker that
    must die with its parent (PDEATHSIG fires when the forking *thread* ends)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def where(self) -> tuple[str, str]:
        """This actor's Ray node id and IP address."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def free_port(self) -> int:
        """A TCP port free on every interface of this node: rank 0's rendezvous store listens on it."""
        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def start(
        self, command: Sequence[str], env: Mapping[str, str], wiring: Mapping[str, Any], cwd: str, log_dir: str
    ) -> _Started:
        """Start the worker in its own session, dying with this actor, writing its output into its rank's log.
        `wiring` holds the keyword arguments of `pollux.runtime.processes.worker_env`; the node's environment is
        this actor's."""
        full_env = worker_env(env, **wiring)
        try:
            resolved = resolve_command(command, Path(cwd), full_env.get("PATH"))
        except LaunchError as exc:
            return _Started(error=str(exc))
        argv, preexec_fn = die_with_parent(resolved)
        try:
            log_fd = open_rank_log(Path(log_dir), wiring["rank"], wiring["world_size"], socket.gethostname())
        except OSError as exc:
            return _Started(error=f"cannot write its log in {log_dir} ({exc})")
        try:
            self._proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=preexec_fn,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return _Started(error=f"cannot start {resolved[0]!r}: {exc}")
        finally:
            os.close(log_fd)
        return _Started(pid=self._proc.pid, start_ticks=process_start_ticks(self._proc.pid) or 0)

    def poll(self) -> int | None:
        """None while the worker runs, then its exit code (a signal s as 128 + s)."""
        if self._proc is None or self._proc.poll() is None:
            return None
        return exit_code(self._proc.returncode)

    def terminate(self) -> None:
        """SIGTERM the worker (not its session: the agent checkpoints, then ends its own helpers)."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGTERM)

    def kill(self) -> int | None:
        """SIGKILL the worker's whole session, helpers included; its exit code once collected."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(_KILL_WAIT_S)
        return self.poll()


@dataclass
class _Group:
    """One job's placement group, its actors (one per rank) and what is known of their workers."""

    placement_group: PlacementGroup
    actors: list[ActorHandle]
    workers: list[WorkerInfo]
    exit: GroupExit
    node_ids: list[str]  # the Ray node of each rank (a node that left the pool has no pool index any more)
    code: int | None = None  # the group's exit code once settled: `exit`'s, or EXIT_NODE_LOST
    unreachable: set[int] = field(default_factory=set)  # ranks whose actors died or did not answer a kill
    crashed_at: float | None = None  # when its workers had all exited with a crash (monotonic)

    def running(self) -> bool:
        return self.exit.running()


class RayLauncher:
    """Starts worker groups on the nodes of a Ray cluster that offer `gpu_resource`; see the module docstring.

    The pool is the alive nodes offering the resource when the launcher starts (`pool_nodes`), each with its own
    GPU count and type; `refresh` takes in nodes that joined or left since (`allow_empty`: the pool may start
    empty, for a cluster whose autoscaler starts every GPU node). Thread-safe: the service's loop and its HTTP
    handlers may call it at once.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        gpu_resource: str = "GPU",
        stop_grace_s: float = 30.0,
        namespace: str = "pollux",
        placement_timeout_s: float = 20.0,
        gpu_type_resources: Mapping[str, str] | None = None,
        allow_empty: bool = False,
    ) -> None:
        import ray

        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=address, namespace=namespace, log_to_driver=False)
        self._gpu_resource = gpu_resource
        self._gpu_type_resources = dict(gpu_type_resources or {})
        self._stop_grace_s = stop_grace_s
        self._placement_timeout_s = placement_timeout_s
        self._nodes = pool_nodes(ray.nodes(), gpu_resource, self._gpu_type_resources)
        if not self._nodes and not allow_empty:
            if self._owns_ray:
                ray.shutdown()
            raise LaunchError(
                f"no alive node of the Ray cluster offers the resource {gpu_resource!r}: start the nodes with it, "
                f"e.g. ray start --resources='{{\"{gpu_resource}\": 4}}' (or pick gpu_resource to match the cluster)"
            )
        self._cluster: Cluster | None = pool_cluster(self._nodes) if self._nodes else None
        self._host = ray.util.get_node_ip_address()
        self._groups: dict[str, _Group] = {}
        self._launching: set[str] = set()  # jobs whose launch waits on Ray outside the lock
        self._alive_seen: tuple[float, frozenset[str]] = (-_ALIVE_TTL_S, frozenset())  # (when, alive node ids)
        self._quarantined: dict[str, float] = {}  # node id -> until when (monotonic) it is left out
        self._lock = threading.RLock()
        self._closed = False

    @property
    def cluster(self) -> Cluster:
        """The pool as the policy sees it: the Ray nodes offering the GPU resource, grouped by type and size.
        Only for a pool with nodes: see `has_nodes`."""
        if self._cluster is None:
            raise LaunchError("the Ray cluster has no node offering the GPU resource yet", transient=True)
        return self._cluster

    @property
    def has_nodes(self) -> bool:
        """Whether the pool holds any node (an autoscaled cluster may have none)."""
        return self._cluster is not None

    @property
    def node_ids(self) -> list[str]:
        """The Ray node id of each pool node, in pool order (node i of an allocation is `node_ids[i]`)."""
        return [n.node_id for n in self._nodes]

    @property
    def nodes(self) -> list[RayNode]:
        return list(self._nodes)

    def alive_nodes(self) -> list[RayNode]:
        """Every alive node of the Ray cluster offering the GPU resource now, in pool order."""
        import ray

        nodes = ray.nodes()
        self._alive_seen = (time.monotonic(), frozenset(n["NodeID"] for n in nodes if n["Alive"]))
        return pool_nodes(nodes, self._gpu_resource, self._gpu_type_resources)

    def _alive_ids(self, fresh: bool = False) -> frozenset[str]:
        """The ids of the nodes Ray lists alive: read at most every `_ALIVE_TTL_S`, or now if `fresh`."""
        import ray

        seen_at, ids = self._alive_seen
        if fresh or time.monotonic() - seen_at > _ALIVE_TTL_S:
            ids = frozenset(n["NodeID"] for n in ray.nodes() if n["Alive"])
            self._alive_seen = (time.monotonic(), ids)
        return ids

    def _quarantine(self, node_ids: Sequence[str]) -> None:
        """Leave nodes that failed a reservation out of the pool for `_QUARANTINE_S` (module docstring)."""
        if not node_ids:
            return
        until = time.monotonic() + _QUARANTINE_S
        for node_id in node_ids:
            self._quarantined[node_id] = until
        LOG.warning("leaving Ray node(s) %s out for %.0f s: a reservation failed", ", ".join(node_ids), _QUARANTINE_S)

    def _end_quarantines(self) -> None:
        """Forget the quarantines that are over, and those of nodes Ray no longer lists alive (they left for good)."""
        now, alive = time.monotonic(), self._alive_seen[1]
        self._quarantined = {n: t for n, t in self._quarantined.items() if t > now and n in alive}

    def _usable(self, nodes: list[RayNode], busy: set[str]) -> list[RayNode]:
        """`nodes` less the quarantined ones that no group of ours runs on."""
        self._end_quarantines()
        return [n for n in nodes if n.node_id not in self._quarantined or n.node_id in busy]

    def refresh(self, keep: Mapping[str, int] | None = None) -> dict[int, int] | None:
        """Make the pool the alive nodes, at most `keep[type]` of each type named there (the ones hosting worker
        groups first, then by node id: the others are left idle for Ray's autoscaler to release). Returns None when
        the pool did not change, else the new index of each old pool node still in it; a node missing from the
        map is gone (dead, or released): whatever ran there must be stopped."""
        with self._lock:
            busy = {node_id for g in self._groups.values() for node_id in g.node_ids}
            alive = self._usable(self.alive_nodes(), busy)
            if keep is not None:
                chosen: list[RayNode] = []
                for gpu_type in dict.fromkeys(n.gpu_type for n in alive):
                    of_type = [n for n in alive if n.gpu_type == gpu_type]
                    of_type.sort(key=lambda n: (n.node_id not in busy, n.node_id))
                    chosen.extend(of_type[: keep.get(gpu_type, len(of_type))])
                alive = sorted(chosen, key=lambda n: (n.gpu_type, n.gpus, n.node_id))
            if [n.node_id for n in alive] == self.node_ids:
                return None
            new_index = {n.node_id: i for i, n in enumerate(alive)}
            remap = {i: new_index[n.node_id] for i, n in enumerate(self._nodes) if n.node_id in new_index}
            for group in self._groups.values():  # workers keep naming their node, for `reap` and the next refresh
                group.workers = [
                    WorkerInfo(w.rank, remap.get(w.node, -1), w.pid, w.host, w.start_ticks) for w in group.workers
                ]
            self._nodes = alive
            self._cluster = pool_cluster(alive) if alive else None
            return remap

    def launch(self, request: LaunchRequest) -> list[WorkerInfo]:
        """Reserve the allocation's GPUs on exactly its nodes, then start one worker per GPU; nothing of the job
        is left behind (actors, placement group) if any part fails. An exited, unforgotten group is forgotten; a
        dead driver's group of the job is waited for, up to the stop grace period (module docstring).

        The launcher's lock is held only to check and to record: waiting for Ray (a previous group's removal, the
        reservation, the actors' start) leaves `poll`, `stop` and `kill` of other jobs free to run meanwhile."""
        from ray.exceptions import GetTimeoutError, RayActorError

        with self._lock:
            nodes = self._check_launchable(request)
            node_ids = [self._nodes[i].node_id for i in nodes]
            self._launching.add(request.job)
        actors: list[ActorHandle] = []
        pg: PlacementGroup | None = None
        try:
            self._await_previous_group(request.job)
            pg = self._reserve(request.job, nodes, node_ids)
            actors = self._create_actors(request.job, pg, len(nodes))
            workers = self._start_workers(request, nodes, node_ids, actors)
            with self._lock:
                if self._closed:
                    raise LaunchError(f"job {request.job}: the Ray launcher was shut down while it launched")
                self._groups[request.job] = _Group(pg, actors, workers, GroupExit.of(len(actors)), node_ids)
            return list(workers)
        except ValueError as exc:  # an actor name still taken: a previous driver's actor not cleaned up yet
            self._release(actors, pg)
            raise LaunchError(
                f"job {request.job}: an actor of its previous worker group is still alive ({exc}); retry later",
                transient=True,
            ) from exc
        except (GetTimeoutError, RayActorError) as exc:
            self._release(actors, pg)
            raise LaunchError(f"job {request.job}: its worker actors did not start ({exc})", transient=True) from exc
        except BaseException:
            self._release(actors, pg)
            raise
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
            self._drop(request.job)
        if not request.command:
            raise LaunchError(f"job {request.job}: the command is empty (give the program to run and its arguments)")
        return self._check_allocation(request)

    def _create_actors(self, job: str, pg: PlacementGroup, ranks: int) -> list[ActorHandle]:
        """One actor per rank, in its rank's bundle, holding one GPU (Ray's or the custom resource)."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        worker_cls = ray.remote(_WorkerActor)
        gpu_options: dict[str, Any] = (
            {"num_gpus": 1} if self._gpu_resource == "GPU" else {"resources": {self._gpu_resource: 1}}
        )
        actors: list[ActorHandle] = []
        try:
            for rank in range(ranks):
                strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=rank)
                options = {"num_cpus": 0, "max_restarts": 0, "scheduling_strategy": strategy, **gpu_options}
                actor: Any = worker_cls.options(name=f"{GROUP_PREFIX}{job}-{rank}", **options).remote()
                actors.append(actor)
        except BaseException:
            self._kill_actors(actors)  # the ones already created: the caller only knows of a complete list
            raise
        return actors

    def _check_allocation(self, request: LaunchRequest) -> list[int]:
        """The pool node of each rank (node order, then local), after checking the allocation fits the pool."""
        alloc = request.allocation
        if len(alloc) != len(self._nodes) or any(g < 0 for g in alloc) or sum(alloc) < 1:
            raise LaunchError(
                f"job {request.job}: allocation {alloc} must list >= 0 GPUs for each of the {len(self._nodes)} "
                "Ray nodes, at least one in all"
            )
        for i, gpus in enumerate(alloc):
            if gpus > self._nodes[i].gpus:
                raise LaunchError(
                    f"job {request.job}: allocation {alloc} asks for {gpus} {self._gpu_resource} on node {i}, "
                    f"which has {self._nodes[i].gpus}"
                )
        alive = self._alive_ids(fresh=True)
        self._end_quarantines()
        for i, gpus in enumerate(alloc):
            if gpus and self._nodes[i].node_id not in alive:
                raise LaunchError(
                    f"job {request.job}: node {i} (Ray node {self._nodes[i].node_id}) is not alive (restarting?)",
                    transient=True,
                )
            if gpus and self._nodes[i].node_id in self._quarantined:
                raise LaunchError(
                    f"job {request.job}: node {i} (Ray node {self._nodes[i].node_id}) failed a reservation lately; "
                    f"left out for up to {_QUARANTINE_S:g} s unless Ray declares it dead",
                    transient=True,
                )
        return [i for i, gpus in enumerate(alloc) for _ in range(gpus)]

    def _await_previous_group(self, job: str) -> None:
        """Wait up to the stop grace period for a placement group of the job that is not this launcher's (a dead
        driver's: its workers got SIGTERM and may be checkpointing) to be removed; Ray removes it once that
        driver's actors are gone. Still there → a transient `LaunchError`."""
        from ray.util.placement_group import get_placement_group, placement_group_table

        name = GROUP_PREFIX + job
        deadline = time.monotonic() + self._stop_grace_s
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
            time.sleep(_REMOVAL_POLL_S)

    def _reserve(self, job: str, nodes: list[int], node_ids: list[str]) -> PlacementGroup:
        """One bundle per rank, pinned to its node by label: all of them or none, within the placement timeout.
        A node Ray declares dead meanwhile ends the wait at once; a timeout quarantines the nodes (module docstring)."""
        from ray.exceptions import RaySystemError
        from ray.util.placement_group import placement_group, remove_placement_group

        try:
            pg = placement_group(
                [{self._gpu_resource: 1} for _ in nodes],
                strategy="PACK",
                name=GROUP_PREFIX + job,
                bundle_label_selector=[{NODE_ID_LABEL: node_id} for node_id in node_ids],
            )
        except RaySystemError as exc:  # the name was taken since `_await_previous_group` looked
            raise LaunchError(
                f"job {job}: Ray refused its placement group ({exc}); retry later", transient=True
            ) from exc
        deadline = time.monotonic() + self._placement_timeout_s
        while not pg.wait(max(min(_RESERVE_SLICE_S, deadline - time.monotonic()), 0.0)):
            wanted = {i: nodes.count(i) for i in sorted(set(nodes))}
            dead = sorted(set(node_ids) - self._alive_ids(fresh=True))
            if dead:
                remove_placement_group(pg)
                raise LaunchError(
                    f"job {job}: Ray node(s) {', '.join(dead)} died while Ray reserved {self._gpu_resource} per node "
                    f"{wanted}",
                    transient=True,
                )
            if time.monotonic() >= deadline:
                remove_placement_group(pg)
                with self._lock:  # a node our own groups hold GPUs on is busy, not unresponsive
                    held = {node_id for g in self._groups.values() for node_id in g.node_ids}
                    self._quarantine(sorted(set(node_ids) - held))
                raise LaunchError(
                    f"job {job}: Ray could not reserve {self._gpu_resource} per node {wanted} within "
                    f"{self._placement_timeout_s:g} s (held by other jobs or other Ray users, or the node is "
                    "unresponsive; see `ray status`)",
                    transient=True,
                )
        return pg

    def _start_workers(
        self, request: LaunchRequest, nodes: list[int], node_ids: list[str], actors: list[ActorHandle]
    ) -> list[WorkerInfo]:
        """Check each actor sits on its rank's node, wire the ranks like torchrun and start their commands."""
        import ray

        places: list[tuple[str, str]] = ray.get([a.where.remote() for a in actors], timeout=_ACTOR_CALL_TIMEOUT_S)
        for rank, (node_id, _) in enumerate(places):
            if node_id != node_ids[rank]:
                raise LaunchError(
                    f"job {request.job}: Ray placed rank {rank} on node {node_id}, not on pool node {nodes[rank]} "
                    f"({node_ids[rank]}): this Ray version ignores bundle label selectors"
                )
        port: int = ray.get(actors[0].free_port.remote(), timeout=_ACTOR_CALL_TIMEOUT_S)  # type: ignore[assignment]
        local_ranks = [nodes[:rank].count(node) for rank, node in enumerate(nodes)]
        refs = []
        for rank, (actor, node) in enumerate(zip(actors, nodes, strict=True)):
            wiring = {
                "rank": rank,
                "local_rank": local_ranks[rank],
                "world_size": len(nodes),
                "local_world_size": request.allocation[node],
                "master_addr": places[0][1],
                "master_port": port,
                "num_nodes": num_nodes_used(request.allocation),
                # a virtual GPU: the worker must not grab a real one; a `GPU` one is the one Ray gave the actor
                "cuda_visible_devices": None if self._gpu_resource == "GPU" else "",
            }
            env = {**request.env, "POLLUX_RAY_NODE_ID": places[rank][0]}
            refs.append(actor.start.remote(list(request.command), env, wiring, str(request.cwd), str(request.log_dir)))
        started: list[_Started] = ray.get(refs, timeout=_ACTOR_CALL_TIMEOUT_S)
        for rank, s in enumerate(started):
            if s.error is not None:
                self._kill_actors(actors)
                raise LaunchError(f"job {request.job}: rank {rank} on node {nodes[rank]}: {s.error}")
        return [
            WorkerInfo(rank=rank, node=nodes[rank], pid=s.pid, host=places[rank][1], start_ticks=s.start_ticks)
            for rank, s in enumerate(started)
        ]

    def poll(self, job: str) -> int | None:
        """None while any worker runs; then the group's exit code. The first crash (a dead actor included) gets
        the other workers killed at once, since they would block in the next collective. A group that crashed
        with a node Ray declares dead exits `EXIT_NODE_LOST`, whatever its workers said (module docstring)."""
        with self._lock:
            group = self._group(job)
            if group.code is None:
                if group.running():
                    self._collect(group)
                    if group.exit.crash_code is not None and group.running():
                        self._kill_workers(group)
                code = group.exit.settle()
                if code is not None and code != 0 and code != EXIT_STOPPED:
                    code = self._verdict(job, group, code)
                group.code = code
            return group.code

    def _verdict(self, job: str, group: _Group, code: int) -> int | None:
        """A crashed group's code: `EXIT_NODE_LOST` if Ray lists one of its nodes dead. Where an actor died or did
        not answer (its node may be lost, and a sibling crashed first because its peer vanished) but Ray still lists
        every node alive, None (still running) until Ray declares the node dead or `_VERDICT_WAIT_S` has passed."""
        lost = sorted(set(group.node_ids) - self._alive_ids(fresh=group.crashed_at is None))
        if lost:
            LOG.warning("job %s: Ray node(s) %s lost under its workers", job, ", ".join(lost))
            return EXIT_NODE_LOST
        if group.crashed_at is None:
            group.crashed_at = time.monotonic()
            if group.unreachable:
                LOG.info(
                    "job %s: crashed with unreachable rank(s) %s; waiting for Ray's word on their nodes",
                    job,
                    sorted(group.unreachable),
                )
        if group.unreachable and time.monotonic() - group.crashed_at < _VERDICT_WAIT_S:
            return None
        return code

    def stop(self, job: str) -> None:
        """Ask each actor to SIGTERM its worker; returns without waiting for them."""
        with self._lock:
            group = self._group(job)
            for actor, code in zip(group.actors, group.exit.codes, strict=True):
                if code is None:
                    actor.terminate.remote()

    def kill(self, job: str) -> None:
        """SIGKILL every running worker (its helpers too), then kill the actors; `poll` reports 137 for them."""
        with self._lock:
            self._kill_workers(self._group(job))

    def forget(self, job: str) -> None:
        """Remove an exited group's actors and placement group, so that its GPUs are free for the next launch."""
        with self._lock:
            group = self._group(job)
            if group.running():
                raise RuntimeError(f"job {job}: cannot forget a running worker group (stop or kill it, then poll)")
            self._drop(job)

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
            for job in list(self._groups):
                self._drop(job)
            if self._owns_ray:
                ray.shutdown()

    def _group(self, job: str) -> _Group:
        group = self._groups.get(job)
        if group is None:
            raise UnknownJobError(f"job {job}: the Ray launcher has no worker group for it")
        return group

    def _collect(self, group: _Group) -> None:
        """Ask the actors of workers not known to have exited for their codes (waiting at most `_POLL_WAIT_S`: an
        answer not in by then is asked for again at the next poll); a worker on a node Ray declares dead, or whose
        actor died, is lost."""
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

        alive = self._alive_ids()
        for i, c in enumerate(group.exit.codes):
            if c is None and group.node_ids[i] not in alive:
                LOG.warning("rank %d's node %s is dead: its worker exited %d", i, group.node_ids[i], EXIT_LOST)
                group.exit.record(i, EXIT_LOST)
        calls = {i: group.actors[i].poll.remote() for i, c in enumerate(group.exit.codes) if c is None}
        for i, answer in _answers(calls, _POLL_WAIT_S).items():
            if isinstance(answer, ActorUnavailableError):
                continue  # a transient hiccup: ask again at the next poll
            if isinstance(answer, (ActorDiedError, RayActorError)):
                LOG.warning("rank %d's actor died (node lost?): counting its worker as exited %d", i, EXIT_LOST)
                group.unreachable.add(i)
                answer = EXIT_LOST
            if isinstance(answer, int):
                group.exit.record(i, answer)

    def _kill_workers(self, group: _Group) -> None:
        """SIGKILL each running worker through its actor (collecting its code), then kill every actor."""
        calls = {i: group.actors[i].kill.remote() for i, c in enumerate(group.exit.codes) if c is None}
        answers = _answers(calls, _KILL_ANSWER_S)
        for i in calls:
            code = answers.get(i)
            if i not in answers or isinstance(code, BaseException):  # the actor is gone or does not answer
                group.unreachable.add(i)
            group.exit.record(i, code if isinstance(code, int) else EXIT_LOST)
        self._kill_actors(group.actors)

    def _kill_actors(self, actors: list[ActorHandle]) -> None:
        import ray

        for actor in actors:
            with contextlib.suppress(Exception):  # an actor that is already gone
                ray.kill(actor, no_restart=True)

    def _release(self, actors: list[ActorHandle], pg: PlacementGroup | None) -> None:
        """Give back everything one group holds: its actors (their workers get SIGTERM), then its GPUs."""
        from ray.util.placement_group import remove_placement_group

        self._kill_actors(actors)
        if pg is not None:
            with contextlib.suppress(Exception):  # removed already
                remove_placement_group(pg)

    def _drop(self, job: str) -> None:
        group = self._groups.pop(job)
        self._release(group.actors, group.placement_group)


def _answers(calls: Mapping[int, Any], timeout_s: float) -> dict[int, object]:
    """The results of actor calls (`ObjectRef`s by rank) that are in within `timeout_s`, all waited for together:
    a value, or the exception the call raised. A call not in by then is left out."""
    import ray

    if not calls:
        return {}
    refs = list(calls.values())
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    answers: dict[int, object] = {}
    for i, ref in calls.items():
        if ref in ready:
            try:
                answers[i] = ray.get(ref, timeout=0)
            except Exception as exc:  # the call failed: the caller tells which failures mean what
                answers[i] = exc
    return answers

"""The local backend's launcher: this machine is one node, its GPUs (or CPU cores) are the slots.

Worker groups start like `torchrun --nnodes=1 --nproc_per_node=n` would start them, one process per slot, each
in its own session so that one `killpg` takes its helpers (data-loader workers) with it, dying with the scheduler
and recorded by pid and start time (`pollux.runtime.processes`). For a scheduler that can die:

* A worker writes its output straight into its rank's log file (`pollux.runtime.joblog`), never into a pipe to
  the scheduler: after the scheduler died, a `print` on the way to the checkpoint must not fail.
* A scheduler killed before it recorded the workers cannot reap them; the request's `lock_path` keeps it from
  starting a second group beside them: every worker inherits an exclusive `flock` on it, so it is held until the
  last of them (and of their children) exits, and a launch that finds it held fails as transient.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pollux.cluster import Cluster, NodeGroup, num_nodes_used
from pollux.defaults import STOP_GRACE_S
from pollux.errors import LaunchError, SpecError, UnknownJobError
from pollux.runtime.gpu_types import CPU_SLOT_TYPE, UNKNOWN_GPU_TYPE, type_from_device_name
from pollux.runtime.joblog import RankLog, open_rank_log, wait_written
from pollux.runtime.launcher import LaunchRequest, WorkerInfo
from pollux.runtime.processes import (
    GroupExit,
    die_with_parent,
    exit_code,
    process_start_ticks,
    reap_processes,
    resolve_command,
    signal_group,
    worker_env,
)

SlotKind = Literal["gpu", "cpu"]

_LOCK_MARGIN_S = 1.0  # past the stop grace period, how long a launch waits for the previous group's lock
_LOCK_RETRY_S = 0.05
_CRASH_KILL_WAIT_S = 2.0  # how long one `poll` waits for the siblings of a crashed worker to die after SIGKILL


def detect_gpu_devices() -> list[tuple[str, str]]:
    """This machine's GPUs as (`CUDA_VISIBLE_DEVICES` entry, GPU type): `nvidia-smi`'s indices and names, narrowed
    to an existing `CUDA_VISIBLE_DEVICES` list. Asking `nvidia-smi` (not torch) keeps the scheduler free of torch
    and CUDA."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []  # a driver that is not loaded: no usable GPUs
    rows = [line.split(",", 1) for line in out.splitlines() if line.strip()]
    types = {row[0].strip(): type_from_device_name(row[1]) if len(row) > 1 else UNKNOWN_GPU_TYPE for row in rows}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(types.items())
    # entries may also be GPU UUIDs ("GPU-…"), which nvidia-smi's index query does not list: keep them as given
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return [(e, types.get(e, UNKNOWN_GPU_TYPE)) for e in entries if not e.isdigit() or e in types]


def _free_port() -> int:
    """A TCP port nobody listens on now, for rank 0's rendezvous store (torchrun picks it the same way)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _take_group_lock(job: str, lock_path: Path, wait_s: float) -> int:
    """An open descriptor holding an exclusive `flock` on `lock_path`, emptied for the new group's pids; waits up to
    `wait_s` for a previous group (started by a scheduler that died) to exit and release it."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise LaunchError(f"job {job}: cannot open its lock file {lock_path} ({exc})") from exc
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holders = os.pread(fd, 4096, 0).decode(errors="replace").split() or ["unknown"]
                os.close(fd)
                raise LaunchError(
                    f"job {job}: its previous worker group is still running (pids {', '.join(holders)} hold "
                    f"{lock_path}; started by a scheduler that died, it is probably checkpointing); retry later",
                    transient=True,
                ) from None
            time.sleep(_LOCK_RETRY_S)
    os.ftruncate(fd, 0)  # the pids in it are a previous group's, long gone
    return fd


def _record_holders(fd: int, workers: Sequence[WorkerInfo]) -> None:
    """Write the group's pids into its lock file, for the message of a launch that finds the lock held."""
    os.pwrite(fd, " ".join(str(w.pid) for w in workers).encode() + b"\n", 0)


@dataclass
class _Group:
    """One job's running (or exited, not yet forgotten) workers and the slots they hold."""

    procs: list[subprocess.Popen[bytes]]
    workers: list[WorkerInfo]
    slots: list[int]
    exit: GroupExit
    logs: list[RankLog] = field(default_factory=list)  # until their last lines are written, after the exit

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)


class LocalLauncher:
    """Starts worker groups as processes on this machine; one node whose slots are its GPUs or CPU cores.

    With GPUs, each worker sees exactly one (`CUDA_VISIBLE_DEVICES`), and the node's GPU type is `nvidia-smi`'s
    (or `gpu_types[0]`'s name); without, `slots` CPU slots (default: the number of cores) of type "cpu", and every
    worker sees no GPU. `gpu_types` as (name, slots) pairs makes CPU slots one virtual node per pair, of that
    type: a mixed cluster on one machine, for tests and demos of GPU types. Thread-safe: the service's loop and
    its HTTP handlers may call it at once (but see the module docstring on which thread should `launch`).
    """

    name = "local"

    def __init__(
        self,
        slots: int | None = None,
        *,
        stop_grace_s: float = STOP_GRACE_S,
        gpu_types: Sequence[tuple[str, int | None]] = (),
    ) -> None:
        if slots is not None and slots < 1:
            raise SpecError(f"local launcher slots must be >= 1, got {slots}")
        gpus = detect_gpu_devices()
        if gpus:
            if slots is not None and slots > len(gpus):
                raise SpecError(
                    f"local launcher slots={slots} but this machine shows {len(gpus)} GPUs "
                    f"({','.join(d for d, _ in gpus)}): use at most {len(gpus)}"
                )
            gpus = gpus[: slots or len(gpus)]
            if gpu_types:  # the user names the type (one for all: the machine's GPUs are one node)
                gpus = [(device, gpu_types[0][0]) for device, _ in gpus]
            if len({t for _, t in gpus}) > 1:
                raise SpecError(
                    f"this machine's GPUs are of several types ({', '.join(sorted({t for _, t in gpus}))}); the local "
                    "backend runs one: pick its GPUs with CUDA_VISIBLE_DEVICES (or use the Ray backend)"
                )
            self._devices = [device for device, _ in gpus]
            self._slot_kind: SlotKind = "gpu"
            groups = [NodeGroup(gpus[0][1], 1, len(gpus))]
        else:
            # CPU slots: one node of `slots` (default: the cores), or one virtual node per `--gpu-type NAME=SLOTS`
            named = list(gpu_types) or [(CPU_SLOT_TYPE, None)]
            groups = [NodeGroup(name, 1, count or slots or os.cpu_count() or 1) for name, count in named]
            self._devices = [""] * sum(g.gpus_per_node for g in groups)
            self._slot_kind = "cpu"
        self._cluster = Cluster.of_groups(groups)
        self._slot_node = [node for node, size in enumerate(self._cluster.node_gpus) for _ in range(size)]
        self._stop_grace_s = stop_grace_s
        self._host = socket.gethostname()
        self._groups: dict[str, _Group] = {}
        self._lock = threading.RLock()
        self._closed = False

    @property
    def cluster(self) -> Cluster:
        """One node with one slot per GPU (or per CPU slot): what the policy allocates."""
        return self._cluster

    @property
    def slot_kind(self) -> SlotKind:
        """What a slot is: one GPU ("gpu"), or one CPU core on a machine without GPUs ("cpu"); the service shows it."""
        return self._slot_kind

    def free_slots(self) -> int:
        """Slots no group holds (an exited group holds its slots until `forget`)."""
        with self._lock:
            return len(self._devices) - sum(len(g.slots) for g in self._groups.values())

    def launch(self, request: LaunchRequest) -> list[WorkerInfo]:
        """Start `request.allocation[0]` workers of the job; nothing is left running if any of them cannot start.

        An exited group of the same job that was not forgotten yet is forgotten first. With a `lock_path`, waits up
        to the stop grace period (and a little) for a previous group of the job to release it. Call this from a
        long-lived thread: the kernel SIGTERMs the workers when the thread that started them ends (module docstring).
        """
        with self._lock:
            self._check_launchable(request)  # a permanent error is told at once, not after waiting for the lock
        lock_fd = None
        if request.lock_path is not None:
            lock_fd = _take_group_lock(request.job, request.lock_path, self._stop_grace_s + _LOCK_MARGIN_S)
        try:
            with self._lock:
                return self._launch(request, lock_fd)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)  # the workers hold their own copies of the lock now

    def _launch(self, request: LaunchRequest, lock_fd: int | None) -> list[WorkerInfo]:
        n, command = self._check_launchable(request)
        old = self._groups.get(request.job)
        if old is not None:
            self._drop(request.job)  # exited: `_check_launchable` refuses a running one
        alloc = request.allocation
        slots = [
            slot
            for node, wanted in enumerate(alloc)
            for slot in [
                s for s in range(len(self._devices)) if self._slot_node[s] == node and not self._slot_taken(s)
            ][:wanted]
        ]
        group = _Group(procs=[], workers=[], slots=slots, exit=GroupExit.of(0))
        port = _free_port()
        for rank, slot in enumerate(slots):
            node = self._slot_node[slot]
            env = worker_env(
                request.env,
                rank=rank,
                local_rank=sum(1 for s in slots[:rank] if self._slot_node[s] == node),
                world_size=n,
                local_world_size=alloc[node],
                master_addr="127.0.0.1",
                master_port=port,
                num_nodes=num_nodes_used(alloc),
                cuda_visible_devices=self._devices[slot],
            )
            try:
                log = open_rank_log(request.log_dir, rank, n, self._host)
            except OSError as exc:
                self._abort(group)
                raise LaunchError(f"job {request.job}: cannot write its log in {request.log_dir} ({exc})") from exc
            group.logs.append(log)
            try:
                self._start_worker(group, request, command, env, log.fd, lock_fd)
            except (OSError, subprocess.SubprocessError) as exc:
                self._abort(group)
                transient = isinstance(exc, OSError) and exc.errno in (errno.EAGAIN, errno.ENOMEM)  # out of processes
                raise LaunchError(
                    f"job {request.job}: cannot start {command[0]!r} as rank {rank}: {exc}", transient=transient
                ) from exc
        if lock_fd is not None:
            _record_holders(lock_fd, group.workers)
        self._groups[request.job] = group
        return list(group.workers)

    def _check_launchable(self, request: LaunchRequest) -> tuple[int, list[str]]:
        """The number of workers and the resolved command, or the `LaunchError` saying why the job cannot start."""
        if self._closed:
            raise LaunchError(f"job {request.job}: the local launcher was shut down")
        old = self._groups.get(request.job)
        if old is not None and old.running():
            raise LaunchError(
                f"job {request.job}: its workers are still running (stop it and poll first)", transient=True
            )
        n = self._check_allocation(request, exclude=request.job)
        try:
            command = resolve_command(request.command, request.cwd, request.env.get("PATH"))
        except LaunchError as exc:
            raise LaunchError(f"job {request.job}: {exc}") from exc
        return n, command

    def _start_worker(
        self,
        group: _Group,
        request: LaunchRequest,
        command: list[str],
        env: dict[str, str],
        log_fd: int,
        lock_fd: int | None,
    ) -> None:
        """Start the next rank of `group` in its own session, dying with us, holding the job's lock (if any),
        writing its output into `log_fd` (closed here: the worker holds its own copy)."""
        rank = len(group.procs)
        argv, preexec_fn = die_with_parent(command)
        try:
            proc = subprocess.Popen(
                argv,
                cwd=request.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=() if lock_fd is None else (lock_fd,),
                preexec_fn=preexec_fn,
            )
        finally:
            os.close(log_fd)
        group.procs.append(proc)
        group.exit.codes.append(None)
        ticks = process_start_ticks(proc.pid) or 0
        node = self._slot_node[group.slots[rank]]
        group.workers.append(WorkerInfo(rank=rank, node=node, pid=proc.pid, host=self._host, start_ticks=ticks))

    def poll(self, job: str) -> int | None:
        """None while any worker runs; then the group's exit code. A crashed worker gets its siblings killed at
        once (they would block in the next collective), and this call waits a moment for them to die."""
        with self._lock:
            group = self._group(job)
            if group.exit.exit_code is None and self._collect(group):
                self._kill_running(group)
                self._wait(group, _CRASH_KILL_WAIT_S)
                self._collect(group)
            code = group.exit.settle()
            if code is not None and group.logs:  # once: the workers' last lines in their files before anyone reads
                wait_written(group.logs)
                group.logs.clear()
            return code

    def stop(self, job: str) -> None:
        """SIGTERM each worker (not its group: the agent checkpoints, then ends its own helpers); returns at once."""
        with self._lock:
            for proc in self._group(job).procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)  # does nothing for a worker already collected

    def kill(self, job: str) -> None:
        """SIGKILL every running worker's process group, helpers included."""
        with self._lock:
            self._kill_running(self._group(job))

    def forget(self, job: str) -> None:
        """Free the slots of an exited group. Forgetting a running one would lose track of live processes."""
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
        """Stop the recorded workers of this host that still run; see `reap_processes`."""
        return reap_processes(workers, self._host, self._stop_grace_s)

    def shutdown(self) -> None:
        """Refuse further launches; running jobs keep running (stop them first: the kernel SIGTERMs them when the
        thread that launched them ends)."""
        with self._lock:
            self._closed = True

    def _group(self, job: str) -> _Group:
        group = self._groups.get(job)
        if group is None:
            raise UnknownJobError(f"job {job}: the local launcher has no worker group for it")
        return group

    def _slot_taken(self, slot: int) -> bool:
        return any(slot in g.slots for g in self._groups.values())

    def _check_allocation(self, request: LaunchRequest, exclude: str) -> int:
        """The number of workers the allocation asks for; the slots of `exclude`'s exited group count as free.
        More slots than a node has is permanent; more than are free now is transient (other jobs hold them)."""
        alloc = request.allocation
        nodes = self._cluster.num_nodes
        if len(alloc) != nodes:
            raise LaunchError(
                f"job {request.job}: allocation {alloc} names {len(alloc)} nodes; the local backend has {nodes}"
            )
        if any(g < 0 for g in alloc) or sum(alloc) < 1:
            raise LaunchError(f"job {request.job}: allocation {alloc} asks for {sum(alloc)} slots; give 1 or more")
        taken = [s for job, g in self._groups.items() if job != exclude for s in g.slots]
        for node, n in enumerate(alloc):
            total = self._cluster.node_gpus[node]
            free = total - sum(1 for s in taken if self._slot_node[s] == node)
            if n > free:
                where = f" on node {node}" if nodes > 1 else ""
                raise LaunchError(
                    f"job {request.job}: allocation {alloc} asks for {n} {self._slot_kind.upper()} slots{where}; "
                    f"{free} of {total} are free (need 1 to {free})",
                    transient=n <= total,
                )
        return sum(alloc)

    def _collect(self, group: _Group) -> bool:
        """Record the codes of workers that exited since the last look; True if the first crash is among them."""
        first_crash = False
        for i, proc in enumerate(group.procs):
            collected = group.exit.codes[i] is None and proc.poll() is not None
            if collected and group.exit.record(i, exit_code(proc.returncode)):
                first_crash = True
                signal_group(proc.pid, signal.SIGKILL)  # its helpers; the pid was collected only just now
        return first_crash

    def _kill_running(self, group: _Group) -> None:
        for proc in group.procs:
            if proc.poll() is None:  # a collected worker's pid may already belong to someone else
                signal_group(proc.pid, signal.SIGKILL)

    def _wait(self, group: _Group, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for proc in group.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(deadline - time.monotonic(), 0.0))

    def _abort(self, group: _Group) -> None:
        """Undo a launch that failed half-way: kill and collect the workers already started, and their stampers."""
        self._kill_running(group)
        for proc in group.procs:
            proc.wait()
        wait_written(group.logs)

    def _drop(self, job: str) -> None:
        self._groups.pop(job)

"""The local backend's launcher: this machine is one node, its GPUs (or CPU cores) are the slots.

Worker groups start like `torchrun --nnodes=1 --nproc_per_node=n` would start them, one process per slot, each
in its own session so that one `killpg` takes its helpers (data-loader workers) with it. Two guarantees matter
for a scheduler that can die:

* Every worker is started with Linux's `PR_SET_PDEATHSIG = SIGTERM`: if the scheduler process is killed (even
  with SIGKILL) its workers get SIGTERM, checkpoint and exit instead of training on unscheduled. The kernel sends
  that signal when the *thread* that forked the worker exits, not the process: the service must call `launch`
  from a long-lived thread (its main loop), never from a short-lived worker thread.
* Every worker is recorded with its start time (`/proc/<pid>/stat`), so that a restarted scheduler can `reap`
  strays a previous one left behind without ever signalling an unrelated process that reused the pid.

A command whose first word is `python` or `python3` runs with the scheduler's own interpreter (`sys.executable`):
a scheduler started as `.venv/bin/pollux` runs its jobs in that virtual environment, with torch and the agent.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from pollux.cluster import Cluster
from pollux.errors import LaunchError, SpecError, UnknownJobError
from pollux.runtime.launcher import EXIT_STOPPED, LaunchRequest, WorkerInfo

SlotKind = Literal["gpu", "cpu"]

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_PYTHON_NAMES = ("python", "python3")
_CRASH_KILL_WAIT_S = 2.0  # how long one `poll` waits for the siblings of a crashed worker to die after SIGKILL
_READER_JOIN_S = 1.0  # how long `poll`/`forget`/`shutdown` wait for a log reader to drain an exited worker's pipe


def detect_gpus() -> list[str]:
    """This machine's GPUs as `CUDA_VISIBLE_DEVICES` entries: `nvidia-smi`'s indices, narrowed to an existing
    `CUDA_VISIBLE_DEVICES` list. Asking `nvidia-smi` (not torch) keeps the scheduler free of torch and CUDA."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []  # a driver that is not loaded: no usable GPUs
    indices = [line.strip() for line in out.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return indices
    # entries may also be GPU UUIDs ("GPU-…"), which nvidia-smi's index query does not list: keep them as given
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return [e for e in entries if not e.isdigit() or e in indices]


def process_start_ticks(pid: int) -> int | None:
    """The start time of a live process in clock ticks since boot (`/proc/<pid>/stat` field 22), or None when no
    such process runs (a zombie counts as gone: it has exited, only its parent has not collected it yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the command name in parentheses may hold spaces
    if fields[0] in ("Z", "X"):  # field 3: state
        return None
    return int(fields[19])  # field 22: starttime


def exit_code(returncode: int) -> int:
    """A Popen return code as a shell reports it: killed by signal s → 128 + s (SIGTERM → 143, SIGKILL → 137)."""
    return 128 - returncode if returncode < 0 else returncode


def group_exit_code(codes: Sequence[int]) -> int:
    """The worst of the workers' codes: a crash, else 143 (stopped), else 0 (see `pollux.runtime.launcher`)."""
    crashes = [c for c in codes if c not in (0, EXIT_STOPPED)]
    if crashes:
        return crashes[0]
    return EXIT_STOPPED if EXIT_STOPPED in codes else 0


def reap_processes(workers: Sequence[WorkerInfo], host: str, grace_s: float) -> int:
    """SIGTERM the recorded workers that still run on `host` (same pid *and* start time: a reused pid is left
    alone), SIGKILL them and their process groups after `grace_s`. Returns how many were alive."""
    alive = [w for w in workers if w.host == host and w.start_ticks and process_start_ticks(w.pid) == w.start_ticks]
    for w in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(w.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    remaining = alive
    while remaining and time.monotonic() < deadline:
        time.sleep(0.05)
        remaining = [w for w in remaining if process_start_ticks(w.pid) == w.start_ticks]
    for w in remaining:
        if process_start_ticks(w.pid) == w.start_ticks:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(w.pid) == w.pid:  # it leads its own group, as both launchers start workers
                    os.killpg(w.pid, signal.SIGKILL)
                else:
                    os.kill(w.pid, signal.SIGKILL)
    return len(alive)


def _base_env(request_env: Mapping[str, str]) -> dict[str, str]:
    """The scheduler's environment with the request's on top; the rank wiring is added last, so that nothing
    can break it. One OpenMP thread per worker unless someone chose otherwise: n workers share the cores."""
    env = {**os.environ}
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"  # lines reach the log as they are printed
    env.update(request_env)
    return env


def _free_port() -> int:
    """A TCP port nobody listens on now, for rank 0's rendezvous store (torchrun picks it the same way)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's `prctl`, or None off Linux. Loaded in the parent: between fork and exec the child does little."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent_hook() -> Callable[[], None] | None:
    """A `preexec_fn` that makes the kernel SIGTERM the child when the forking thread dies; None off Linux."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent, sigterm = os.getpid(), int(signal.SIGTERM)

    def set_pdeathsig() -> None:
        prctl(_PR_SET_PDEATHSIG, sigterm, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect: nobody would signal us
            os._exit(EXIT_STOPPED)

    return set_pdeathsig


def _signal_group(pid: int, sig: int) -> None:
    """Signal a worker's whole process group (it leads its own session), ignoring one that is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@dataclass
class _Group:
    """One job's running (or exited, not yet forgotten) workers and the slots they hold."""

    procs: list[subprocess.Popen[bytes]]
    workers: list[WorkerInfo]
    slots: list[int]
    readers: list[threading.Thread] = field(default_factory=list)
    codes: list[int | None] = field(default_factory=list)
    crash_code: int | None = None
    exit_code: int | None = None

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)


class LocalLauncher:
    """Starts worker groups as processes on this machine; one node whose slots are its GPUs or CPU cores.

    With GPUs, each worker sees exactly one (`CUDA_VISIBLE_DEVICES`); without, `slots` CPU slots (default: the
    number of cores) and every worker sees no GPU. Thread-safe: the service's loop and its HTTP handlers may call
    it at once (but see the module docstring on which thread should `launch`).
    """

    def __init__(self, slots: int | None = None, *, stop_grace_s: float = 30.0) -> None:
        if slots is not None and slots < 1:
            raise SpecError(f"local launcher slots must be >= 1, got {slots}")
        gpus = detect_gpus()
        if gpus:
            if slots is not None and slots > len(gpus):
                raise SpecError(
                    f"local launcher slots={slots} but this machine shows {len(gpus)} GPUs ({','.join(gpus)}): "
                    f"use at most {len(gpus)}"
                )
            self._devices = gpus[: slots or len(gpus)]
            self._slot_kind: SlotKind = "gpu"
        else:
            self._devices = [""] * (slots or os.cpu_count() or 1)
            self._slot_kind = "cpu"
        self._cluster = Cluster(num_nodes=1, gpus_per_node=len(self._devices))
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

        An exited group of the same job that was not forgotten yet is forgotten first. Call this from a long-lived
        thread: the kernel SIGTERMs the workers when the thread that started them ends (module docstring)."""
        with self._lock:
            if self._closed:
                raise LaunchError(f"job {request.job}: the local launcher was shut down")
            old = self._groups.get(request.job)
            if old is not None:
                if old.running():
                    raise LaunchError(f"job {request.job}: its workers are still running (stop it and poll first)")
                self._drop(request.job)
            n = self._check_allocation(request)
            command = self._resolve_command(request)
            try:
                request.log_path.parent.mkdir(parents=True, exist_ok=True)
                request.log_path.touch()
            except OSError as exc:
                raise LaunchError(f"job {request.job}: cannot write its log {request.log_path} ({exc})") from exc
            slots = [s for s in range(len(self._devices)) if not self._slot_taken(s)][:n]
            group = _Group(procs=[], workers=[], slots=slots)
            base_env = _base_env(request.env)
            port, log_lock = _free_port(), threading.Lock()
            for rank, slot in enumerate(slots):
                wiring = {
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank),
                    "WORLD_SIZE": str(n),
                    "LOCAL_WORLD_SIZE": str(n),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                    "POLLUX_NUM_NODES": "1",
                    "CUDA_VISIBLE_DEVICES": self._devices[slot],
                }
                try:
                    self._start_worker(group, request, command, {**base_env, **wiring}, log_lock)
                except (OSError, subprocess.SubprocessError) as exc:
                    self._abort(group)
                    raise LaunchError(f"job {request.job}: cannot start {command[0]!r} as rank {rank}: {exc}") from exc
            self._groups[request.job] = group
            return list(group.workers)

    def _start_worker(
        self,
        group: _Group,
        request: LaunchRequest,
        command: list[str],
        env: dict[str, str],
        log_lock: threading.Lock,
    ) -> None:
        """Start the next rank of `group` in its own session, dying with us, its output copied to the job's log."""
        rank = len(group.procs)
        proc = subprocess.Popen(
            command,
            cwd=request.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent_hook(),
        )
        group.procs.append(proc)
        group.codes.append(None)
        ticks = process_start_ticks(proc.pid) or 0
        group.workers.append(WorkerInfo(rank=rank, node=0, pid=proc.pid, host=self._host, start_ticks=ticks))
        reader = threading.Thread(
            target=copy_lines,
            args=(proc.stdout, request.log_path, f"[rank {rank}] ".encode(), log_lock),
            name=f"pollux-log-{request.job}-{rank}",
            daemon=True,
        )
        reader.start()
        group.readers.append(reader)

    def poll(self, job: str) -> int | None:
        """None while any worker runs; then the group's exit code. A crashed worker gets its siblings killed at
        once (they would block in the next collective), and this call waits a moment for them to die."""
        with self._lock:
            group = self._group(job)
            if group.exit_code is None and self._collect(group):
                self._kill_running(group)
                self._wait(group, _CRASH_KILL_WAIT_S)
                self._collect(group)
            if group.exit_code is not None or any(c is None for c in group.codes):
                return group.exit_code
            for reader in group.readers:
                reader.join(_READER_JOIN_S)  # the log is complete once the code is out
            codes = [c for c in group.codes if c is not None]
            group.exit_code = group.crash_code if group.crash_code is not None else group_exit_code(codes)
            return group.exit_code

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
        """Refuse further launches and let the log readers of exited workers finish; running jobs keep running
        (stop them first: they would lose their log pipe, and the kernel SIGTERMs them when this process ends)."""
        with self._lock:
            self._closed = True
            groups = list(self._groups.values())
        for group in groups:
            if not group.running():
                for reader in group.readers:
                    reader.join(_READER_JOIN_S)

    def _group(self, job: str) -> _Group:
        group = self._groups.get(job)
        if group is None:
            raise UnknownJobError(f"job {job}: the local launcher has no worker group for it")
        return group

    def _slot_taken(self, slot: int) -> bool:
        return any(slot in g.slots for g in self._groups.values())

    def _check_allocation(self, request: LaunchRequest) -> int:
        alloc = request.allocation
        if len(alloc) != 1:
            raise LaunchError(
                f"job {request.job}: allocation {alloc} names {len(alloc)} nodes; the local backend has one node"
            )
        n, free = alloc[0], self.free_slots()
        if not 1 <= n <= free:
            raise LaunchError(
                f"job {request.job}: allocation {alloc} asks for {n} {self._slot_kind.upper()} slots; "
                f"{free} of {len(self._devices)} are free (need 1 to {free})"
            )
        return n

    def _resolve_command(self, request: LaunchRequest) -> list[str]:
        """The command with its executable checked (before anything starts) and `python` made `sys.executable`."""
        if not request.command:
            raise LaunchError(f"job {request.job}: the command is empty (give the program to run and its arguments)")
        if not request.cwd.is_dir():
            raise LaunchError(
                f"job {request.job}: working directory {request.cwd} does not exist (create it or fix the job's cwd)"
            )
        program, *args = request.command
        if program in _PYTHON_NAMES:
            return [sys.executable, *args]
        if os.sep in program:
            path = Path(program) if os.path.isabs(program) else request.cwd / program
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise LaunchError(
                    f"job {request.job}: executable {path} does not exist or is not executable "
                    f"(fix the path or chmod +x it)"
                )
            return [str(path), *args]
        search_path = request.env.get("PATH", os.environ.get("PATH"))
        found = shutil.which(program, path=search_path)
        if found is None:
            raise LaunchError(
                f"job {request.job}: executable {program!r} is not on PATH (install it, or give its full path "
                "in the job's command)"
            )
        return [found, *args]

    def _collect(self, group: _Group) -> bool:
        """Record the codes of workers that exited since the last look; True if the first crash is among them."""
        first_crash = False
        for i, proc in enumerate(group.procs):
            if group.codes[i] is None and proc.poll() is not None:
                code = group.codes[i] = exit_code(proc.returncode)
                if group.crash_code is None and code not in (0, EXIT_STOPPED):
                    group.crash_code, first_crash = code, True
                    _signal_group(proc.pid, signal.SIGKILL)  # its helpers; the pid was collected only just now
        return first_crash

    def _kill_running(self, group: _Group) -> None:
        for proc in group.procs:
            if proc.poll() is None:  # a collected worker's pid may already belong to someone else
                _signal_group(proc.pid, signal.SIGKILL)

    def _wait(self, group: _Group, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for proc in group.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(deadline - time.monotonic(), 0.0))

    def _abort(self, group: _Group) -> None:
        """Undo a launch that failed half-way: kill and collect the workers already started."""
        self._kill_running(group)
        for proc in group.procs:
            proc.wait()
        for reader in group.readers:
            reader.join(_READER_JOIN_S)

    def _drop(self, job: str) -> None:
        group = self._groups.pop(job)
        for reader in group.readers:
            reader.join(_READER_JOIN_S)


def copy_lines(pipe: IO[bytes], log_path: Path, prefix: bytes, lock: threading.Lock) -> None:
    """Append a worker's output to the job's log line by line, each prefixed with its rank. The group's lock
    keeps lines of different ranks whole; a final line without a newline gets one."""
    with pipe, open(log_path, "ab") as log:
        for line in iter(pipe.readline, b""):
            with lock:
                log.write(prefix + (line if line.endswith(b"\n") else line + b"\n"))
                log.flush()

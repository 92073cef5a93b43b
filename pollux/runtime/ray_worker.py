"""The Ray launcher's worker actor: one per rank, it runs that rank's training command on its node.

Inside its bundle of the job's placement group an actor starts one rank's command as a subprocess, wired like
`torchrun` (`pollux.runtime.processes.worker_env`), its output written by itself into its rank's log file
(`pollux.runtime.joblog`): a worker never depends on its actor or the scheduler being alive to print. The
subprocess dies with its actor (`PR_SET_PDEATHSIG = SIGTERM`): when the scheduler's driver dies, Ray kills its
(non-detached) actors, their workers get SIGTERM, checkpoint and exit.

`WorkerActor` is a plain class, made a Ray actor by `ray.remote` at launch (Ray stays a lazy import); all but
`where` also work as a plain object in this process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pollux.errors import LaunchError
from pollux.runtime.joblog import RankLog, open_rank_log, wait_written
from pollux.runtime.processes import die_with_parent, exit_code, process_start_ticks, resolve_command, worker_env

KILL_WAIT_S = 2.0  # how long an actor waits for its SIGKILLed worker to be collected


@dataclass(frozen=True)
class WorkerStarted:
    """A worker actor's answer to `start`: the subprocess's pid and start time, or why it could not start."""

    pid: int = 0
    start_ticks: int = 0
    error: str | None = None


class WorkerActor:
    """Runs one rank's training command on the node Ray placed this actor on (inside the job's bundle).

    Ray runs a synchronous actor's methods on its main thread, which lives as long as the actor: the right thread
    to fork a worker that must die with its parent (PDEATHSIG fires when the forking *thread* ends)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: RankLog | None = None  # until the worker's last lines are written, after it exits

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
    ) -> WorkerStarted:
        """Start the worker in its own session, dying with this actor, writing its output into its rank's log.
        `wiring` holds the keyword arguments of `pollux.runtime.processes.worker_env`; the node's environment is
        this actor's."""
        full_env = worker_env(env, **wiring)
        try:
            resolved = resolve_command(command, Path(cwd), full_env.get("PATH"))
        except LaunchError as exc:
            return WorkerStarted(error=str(exc))
        argv, preexec_fn = die_with_parent(resolved)
        try:
            self._log = open_rank_log(Path(log_dir), wiring["rank"], wiring["world_size"], socket.gethostname())
        except OSError as exc:
            return WorkerStarted(error=f"cannot write its log in {log_dir} ({exc})")
        try:
            self._proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=self._log.fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=preexec_fn,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return WorkerStarted(error=f"cannot start {resolved[0]!r}: {exc}")
        finally:
            os.close(self._log.fd)
        return WorkerStarted(pid=self._proc.pid, start_ticks=process_start_ticks(self._proc.pid) or 0)

    def poll(self) -> int | None:
        """None while the worker runs, then its exit code (a signal s as 128 + s), once its last lines are in its
        log."""
        if self._proc is None or self._proc.poll() is None:
            return None
        if self._log is not None:
            wait_written([self._log])
            self._log = None
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
                self._proc.wait(KILL_WAIT_S)
        return self.poll()

"""Worker processes, for both launchers: start them so they die with us, find them again by pid *and* start time,
stop strays, and turn their exit codes into one code for the group.

* `die_with_parent` starts a command with Linux's `PR_SET_PDEATHSIG = SIGTERM`: if the launching thread's process is
  killed (even with SIGKILL), the worker gets SIGTERM, checkpoints and exits instead of training on unscheduled. The
  kernel sends it when the *thread* that forked the worker exits: launch from a long-lived thread. `setpriv
  --pdeathsig` sets it (a `preexec_fn` could deadlock the child of a process with threads, as the scheduler and Ray
  actors are); only without `setpriv` does a `preexec_fn` set it.
* A worker is recorded with its start time (`/proc/<pid>/stat`), so a restarted scheduler can `reap_processes` what
  a previous one left behind without ever signalling an unrelated process that reused the pid.
* `GroupExit` is the bookkeeping of a group's exit codes: the first crash is the group's code, whatever its killed
  siblings report (see `pollux.runtime.launcher` for the codes).

A command whose first word is `python` or `python3` runs with this process's own interpreter (`sys.executable`):
a scheduler started as `.venv/bin/pollux` runs its jobs in that virtual environment, with torch and the agent.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pollux.agent import environment
from pollux.errors import LaunchError
from pollux.runtime.launcher import EXIT_STOPPED, WorkerInfo

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_PYTHON_NAMES = ("python", "python3")
# Run by `sh` after `setpriv` set the parent-death signal, before the command: `$0` is the launcher's pid, and a
# different parent means the launcher died before the signal was armed (nobody would ever send it): exit at once.
_ORPHAN_CHECK = 'test "$PPID" = "$0" || exit 143; exec "$@"'


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


def worker_env(
    request_env: Mapping[str, str],
    *,
    rank: int,
    local_rank: int,
    world_size: int,
    local_world_size: int,
    master_addr: str,
    master_port: int,
    num_nodes: int,
    cuda_visible_devices: str | None = None,
) -> dict[str, str]:
    """One worker's environment, as torchrun would set it: this process's environment (the scheduler's, or the
    Ray actor's on its node), the request's on top, the rank wiring last so that nothing can break it. One OpenMP
    thread per worker unless someone chose otherwise: n workers share the cores. `cuda_visible_devices=None`
    keeps the inherited value (Ray sets it for an actor holding a `GPU`)."""
    env = {**os.environ}
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"  # lines reach the log as they are printed
    env.update(request_env)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(local_world_size),
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
    )
    env[environment.NUM_NODES] = str(num_nodes)
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    return env


def resolve_command(command: Sequence[str], cwd: Path, search_path: str | None = None) -> list[str]:
    """The command to run, checked before anything starts: `python` is this process's own interpreter (the
    scheduler's or the Ray actor's environment, with torch and the agent); a path is taken relative to `cwd`; a
    bare name is looked up on `search_path` (default: PATH). Raises a permanent `LaunchError` saying what to fix."""
    if not command:
        raise LaunchError("the command is empty (give the program to run and its arguments)")
    if not cwd.is_dir():
        raise LaunchError(f"working directory {cwd} does not exist (create it or fix the job's cwd)")
    program, *args = command
    if program in _PYTHON_NAMES:
        return [sys.executable, *args]
    if os.sep in program:
        path = cwd / program  # an absolute program stays as it is
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise LaunchError(f"executable {path} does not exist or is not executable (fix the path or chmod +x it)")
        return [str(path), *args]
    found = shutil.which(program, path=search_path)
    if found is None:
        raise LaunchError(
            f"executable {program!r} is not on PATH (install it, or give its full path in the job's command)"
        )
    return [found, *args]


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's `prctl`, or None off Linux. Loaded in the parent: between fork and exec the child does little."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _die_with_parent_hook() -> Callable[[], None] | None:
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


@functools.cache
def _setpriv() -> str | None:
    """util-linux's `setpriv` if it can set the parent-death signal (`--pdeathsig`, since 2.33), else None."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        usage = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return path if "--pdeathsig" in usage else None


def die_with_parent(command: Sequence[str]) -> tuple[list[str], Callable[[], None] | None]:
    """`command` made to get SIGTERM when the thread that starts it dies, and the `preexec_fn` that takes, if any.

    With `setpriv`: `setpriv --pdeathsig TERM -- sh -c CHECK <our pid> command...` and no `preexec_fn`. Both
    `exec`, so the started pid (and its start time) is the command's; the signal survives `exec`, and the check
    closes the window in which we die before `setpriv` armed it. Without `setpriv`: the command, and a hook."""
    setpriv = _setpriv()
    if setpriv is None:
        return list(command), _die_with_parent_hook()
    return [setpriv, "--pdeathsig", "TERM", "--", "/bin/sh", "-c", _ORPHAN_CHECK, str(os.getpid()), *command], None


def signal_group(pid: int, sig: int) -> None:
    """Signal a worker's whole process group (it leads its own session), ignoring one that is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@dataclass
class GroupExit:
    """The exit codes of one group's workers as they come in, and the group's code once all are in.

    The first crash (any code but 0 and 143) is the group's code: the launcher kills the siblings of a crashed
    worker at once (they would block in the next collective), and their 137s must not hide why the group ended."""

    codes: list[int | None]
    crash_code: int | None = None
    exit_code: int | None = None

    @classmethod
    def of(cls, workers: int) -> GroupExit:
        return cls(codes=[None] * workers)

    def running(self) -> bool:
        return any(code is None for code in self.codes)

    def record(self, rank: int, code: int) -> bool:
        """Rank `rank` exited with `code`; True if this is the group's first crash (its siblings must be killed)."""
        self.codes[rank] = code
        if self.crash_code is None and code not in (0, EXIT_STOPPED):
            self.crash_code = code
            return True
        return False

    def settle(self) -> int | None:
        """None while a worker runs; then (and from then on) the group's exit code."""
        if self.exit_code is None and not self.running():
            codes = [c for c in self.codes if c is not None]
            self.exit_code = self.crash_code if self.crash_code is not None else group_exit_code(codes)
        return self.exit_code

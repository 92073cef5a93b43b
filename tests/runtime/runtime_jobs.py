"""Shared pieces of the runtime tests: a tiny elastic job (no torch), specs for it, and waiting for a condition."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from pollux.runtime import logstamp
from pollux.runtime.processes import process_start_ticks

# A real process that behaves like an agent-driven job without torch: it counts steps, keeps its count in the
# checkpoint folder, checkpoints and exits 143 on SIGTERM, finishes with 0, and can crash on purpose.
COUNTER_JOB = textwrap.dedent(
    """
    import argparse, fcntl, os, pathlib, signal, sys, time

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--crash-after", type=int, default=-1)  # steps of this run
    args = parser.parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    ckpt = pathlib.Path(os.environ["POLLUX_CHECKPOINT_DIR"])
    ckpt.mkdir(parents=True, exist_ok=True)
    if rank == 0:  # two live groups of one job would both get here: the second one records it and crashes
        lock = open(ckpt / "rank0.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            (ckpt / "DUPLICATE").write_text(str(os.getpid()))
            sys.exit(9)
    counter = ckpt / "step"
    step = int(counter.read_text()) if counter.exists() else 0
    stop = False

    def on_term(signum, frame):
        global stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    if rank == 0:
        with open(ckpt / "starts.txt", "a") as log:
            log.write(f"{os.getpid()} world={world} step={step}\\n")
    print(f"start world={world} step={step}", flush=True)
    ran = 0
    while step < args.steps:
        if stop:
            print(f"checkpoint at step {step}", flush=True)
            sys.exit(143)
        time.sleep(args.step_s)
        step += 1
        ran += 1
        if rank == 0:
            tmp = ckpt / "step.tmp"
            tmp.write_text(str(step))
            tmp.replace(counter)
        if ran == args.crash_after:
            print("crashing on purpose", flush=True)
            sys.exit(3)
    print("done", flush=True)
    """
)


def write_spec(folder: Path, name: str, args: str = "", **fields: object) -> Path:
    """A TOML spec running the counter job with `args`; extra `fields` go in as TOML values."""
    lines = [f'name = "{name}"', f'command = "python counter.py {args}"', "init_batch_size = 32", "adaptive = false"]
    for key, value in fields.items():
        lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else value!r}")
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


class Clock:
    """The service's clock, moved only by the test."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def wait_for(condition: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    """Poll until `condition()` is truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def log_lines(path: Path) -> list[str]:
    """A rank log's lines as the worker printed them, without the stamps its stamper put before them."""
    lines = path.read_text().splitlines()
    return [line[logstamp.STAMP_BYTES :] if logstamp.STAMP.match(line.encode()) else line for line in lines]


def pid_alive(pid: int, start_ticks: int | None = None) -> bool:
    """Whether the process runs (not a zombie). With its start time (`/proc/<pid>/stat` field 22, as recorded when
    it started), a process that reused the pid since does not count: the one we mean has exited."""
    ticks = process_start_ticks(pid)
    return ticks is not None and (start_ticks is None or ticks == start_ticks)


def started(pid: int) -> tuple[int, int | None]:
    """(pid, start time) of a process seen alive now, to ask `pid_alive` about that very process later."""
    return pid, process_start_ticks(pid)


# Worker scripts of the launcher tests: each gets the test's folder as argv[1] and leaves its traces there.

# Writes env-<rank>.json: the torchrun wiring, its pid, start time, session, cwd, interpreter and parent-death signal.
ENV_DUMP = """
    import ctypes, json, os, sys
    keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "POLLUX_NUM_NODES",
            "POLLUX_RAY_NODE_ID", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "OMP_NUM_THREADS", "FROM_REQUEST"]
    stat = open("/proc/self/stat").read()
    pdeathsig = ctypes.c_int()
    ctypes.CDLL(None).prctl(2, ctypes.byref(pdeathsig), 0, 0, 0)  # PR_GET_PDEATHSIG
    info = {k: os.environ.get(k) for k in keys}
    info.update(pid=os.getpid(), own_session=os.getsid(0) == os.getpid(), cwd=os.getcwd(), executable=sys.executable,
                start_ticks=int(stat[stat.rfind(")") + 2:].split()[19]), pdeathsig=pdeathsig.value)
    open(os.path.join(sys.argv[1], f"env-{os.environ['RANK']}.json"), "w").write(json.dumps(info))
    print("hello from", os.environ["RANK"])
"""

# Waits for SIGTERM (at most 60 s), then leaves a marker and exits 143 as the agent does after checkpointing.
TERM_WAITER = """
    import os, signal, sys, time
    out, rank = sys.argv[1], os.environ["RANK"]
    def on_term(signum, frame):
        open(os.path.join(out, f"term-{rank}"), "w").write("ok")
        sys.exit(143)
    signal.signal(signal.SIGTERM, on_term)
    open(os.path.join(out, f"ready-{rank}"), "w").write(str(os.getpid()))
    for _ in range(600):
        time.sleep(0.1)
"""

# Rank 1 starts a helper process and sleeps; rank 0 crashes with 3 once rank 1 and its helper are up.
CRASH = """
    import os, subprocess, sys, time
    out, rank = sys.argv[1], os.environ["RANK"]
    if rank == "1":
        helper = subprocess.Popen(["sleep", "60"])
        open(os.path.join(out, "helper.tmp"), "w").write(str(helper.pid))
        os.rename(os.path.join(out, "helper.tmp"), os.path.join(out, "helper"))
        time.sleep(60)
    else:
        for _ in range(600):
            if os.path.exists(os.path.join(out, "helper")):
                sys.exit(3)
            time.sleep(0.05)
"""

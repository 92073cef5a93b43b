"""Shared pieces of the runtime tests: a tiny elastic job (no torch), specs for it, and waiting for a condition."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable
from pathlib import Path

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


def wait_for(condition: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    """Poll until `condition()` is truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")

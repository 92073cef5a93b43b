"""How long the `pollux` command line takes to answer: its help, and `ls` with no scheduler running.

Run: .venv/bin/python -m benchmarks.cli_speed [--runs 10]

Each command runs `--runs` times as a fresh process (the `pollux` script beside this interpreter, as a user runs it);
the table gives the median and the fastest wall time, and the median CPU time (steadier on a busy machine), beside
`python -c pass`, the interpreter's own start-up: what no command can go below. `pollux ls` reads an empty state
database offline (no service: the path a user takes when the scheduler is down). Issue 28's goal: `pollux --help`
under 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def pollux_command() -> list[str]:
    """The `pollux` console script of this environment, else `python -m pollux`."""
    script = Path(sys.executable).with_name("pollux")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "pollux"]


def child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_runs(argv: list[str], runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (user + system) from spawn to exit of `argv`, `runs` times; CPU time barely moves when
    other processes share the machine, wall time does. A failed run stops the benchmark with its output."""
    walls, cpus = [], []
    for _ in range(runs):
        cpu, started = child_cpu_s(), time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        walls.append(time.perf_counter() - started)
        cpus.append(child_cpu_s() - cpu)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return walls, cpus


def empty_state_dir(root: Path) -> Path:
    """A state directory holding a job database with no jobs, and no running service."""
    from pollux.runtime.store import StateStore

    state = root / "state"
    state.mkdir(mode=0o700)
    StateStore(state / "state.db").close()
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each command (median and fastest shown)")
    args = parser.parse_args()
    pollux = pollux_command()
    env = {**os.environ, "COLUMNS": "80"}
    with tempfile.TemporaryDirectory() as tmp:
        state = empty_state_dir(Path(tmp))
        cases = [
            ("python -c pass", [sys.executable, "-c", "pass"]),
            ("pollux --help", [*pollux, "--help"]),
            ("pollux ls --help", [*pollux, "ls", "--help"]),
            ("pollux simulate --help", [*pollux, "simulate", "--help"]),
            ("pollux ls (offline, no jobs)", [*pollux, "ls", "--state-dir", str(state)]),
        ]
        table = Table(title=f"pollux command line: wall time of a fresh process, {args.runs} runs each")
        for column in ("command", "median s", "fastest s", "over python s", "CPU s"):
            table.add_column(column, justify="left" if column == "command" else "right")
        yardstick = None
        for label, argv in cases:
            walls, cpus = timed_runs(argv, args.runs, env)
            median = statistics.median(walls)
            yardstick = median if yardstick is None else yardstick
            table.add_row(
                label,
                f"{median:.3f}",
                f"{min(walls):.3f}",
                f"+{median - yardstick:.3f}",
                f"{statistics.median(cpus):.3f}",
            )
    console = Console()
    console.print(table)
    load = os.getloadavg()[0]
    console.print(
        f"on {platform.node()} ({platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
        f"{load:.1f}), Python {platform.python_version()}: {' '.join(pollux)}",
        soft_wrap=True,
    )


if __name__ == "__main__":
    main()

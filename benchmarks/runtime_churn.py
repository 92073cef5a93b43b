"""Scheduling churn in the runtime: restarts per job, waits and idle slots on a fixed three-job scenario, and a
burst of thirty small jobs (`--thirty`), with the runtime's lease and without it (the paper's Pollux).

Run: .venv/bin/python -m benchmarks.runtime_churn [--interval 10] [--repeats 1]
     .venv/bin/python -m benchmarks.runtime_churn --thirty [--lease 60] [--no-lease]

`--thirty`: 30 examples/digits_mlp.py jobs of 3 epochs, 1 worker asked each (pollux may give more), submitted at
once on 4 CPU slots. Per run: starts and stops (checkpoints to move or wait), restarts per job, jobs restarted, the
most restarts of one job, the shortest time a job ran before a round stopped it, the longest wait from submission to
first launch, and the time to drain (first submission to last completion). It checks that no job was stopped by a
round within its lease (restore delay + lease).

A real service (local backend, 4 CPU slots, pollux policy, a round every `--interval` seconds and at every arrival,
completion, crash or cancel) runs three examples/digits_mlp.py jobs submitted at 0, 20 and 45 s: `a` may use 1-3
workers, `b` always 2, `c` 1, so `c` arrives on a full cluster once `a` has grown to 2 workers. Per job: its restarts
(launches after the first: re-allocations and any other relaunch), the wait from its submission to its first launch,
and its completion time; for the run: the slot-seconds left idle while some job waited for GPUs (a job backing off
after a crash counts as waiting too).

Measured on this project's development VM (2 shared AMD EPYC cores, no GPU), three runs each, 10 s rounds:

    commit                   restarts a / b / c   c: wait to first launch (s)   idle slot-s while a job waited
    163951e (before)         2 / 0 / 0 (x3)       13.7 / 13.7 / 14.1            0 / 0 / 0
    issue15-churn (after)    2 / 0 / 0 (x3)        5.4 /  4.8 /  3.9            0 / 0 / 0

Before, the round at `c`'s arrival valued its start at ~0 (the restart factor at age ~1 ms), so `c` waited for the
next periodic round; after, it starts in that round, once `a` has checkpointed to make room (the ~4-5 s left). The
restarts are the same: `a` explores 2 workers (its model, before it ran on 2, predicts linear scaling), finds them
slower on 2 shared cores, and goes back to 1 (for `c`, or for its measurement), both in Pollux's design. A first
scenario without contention (`a` up to 3, `b` up to 2, `c` 1 worker, submitted 20 s apart) gave 4 and 3 restarts
in all (2 / 2 / 0 and 2 / 1 / 0) both before and after, with no wait and no idle slot.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pollux.defaults import LEASE_MIN_RUN_S
from pollux.runtime.local import LocalLauncher
from pollux.runtime.service import Service, ServiceConfig
from pollux.runtime.spec import loads_spec
from pollux.runtime.store import FINAL, StateStore

REPOSITORY = Path(__file__).resolve().parent.parent
SLOTS = 4
# name, workers (min, max), epochs, submitted at (s): b always runs on 2 workers, so the cluster fills up
JOBS = (("a", (1, 3), 4000, 0.0), ("b", (2, 2), 3000, 20.0), ("c", (1, 1), 2000, 45.0))


@dataclass(frozen=True)
class JobResult:
    restarts: int
    wait_s: float  # submission to first launch
    jct_s: float  # submission to completion


def spec_text(name: str, workers: tuple[int, int], epochs: int) -> str:
    return (
        f'name = "{name}"\ncommand = ["python", "examples/digits_mlp.py", "--epochs", "{epochs}"]\n'
        "init_batch_size = 32\nmax_batch_size = 512\nlocal_bsz_bounds = [8, 128]\n"
        f"min_gpus = {workers[0]}\nmax_gpus = {workers[1]}\n"
    )


def idle_while_waiting(store: StateStore, end: float) -> float:
    """Slot-seconds no job held while some submitted, unfinished job did not run, from the store's history."""
    changes = []  # (at, job, status or None, allocation or None)
    for state in store.jobs():
        changes += [(at, state.name, status, None) for at, status, _ in store.history(state.name)]
        changes += [(e["at"], state.name, None, e["allocation"]) for e in store.events(state.name) if "allocation" in e]
    changes.sort(key=lambda change: change[0])
    status: dict[str, str] = {}
    held: dict[str, int] = {}
    idle, last = 0.0, changes[0][0] if changes else end
    for at, job, new_status, allocation in [*changes, (end, "", None, None)]:
        if any(s not in FINAL and s != "running" for s in status.values()):
            idle += max(SLOTS - sum(held.values()), 0) * (at - last)
        last = at
        if new_status is not None:
            status[job] = new_status
        if allocation is not None:
            held[job] = sum(allocation)
    return idle


def run_once(console: Console, interval_s: float, root: Path) -> tuple[dict[str, JobResult], float]:
    config = ServiceConfig(state_dir=root / "state", policy="pollux", interval_s=interval_s, stop_grace_s=60.0)
    service = Service(config, LocalLauncher(SLOTS, stop_grace_s=60.0))
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    start = time.time()
    try:
        with console.status("scenario running") as status:
            for name, workers, epochs, at in JOBS:
                time.sleep(max(start + at - time.time(), 0.0))
                service.submit(loads_spec(spec_text(name, workers, epochs), f"<{name}>", REPOSITORY))
            while not all(service.store.job(name).status in FINAL for name, *_ in JOBS):
                if time.time() - start > 3600:
                    raise TimeoutError("the scenario did not finish within an hour")
                states = [service.store.job(name) for name, *_ in JOBS]
                status.update(", ".join(f"{s.name} {s.status} {sum(s.allocation)}" for s in states))
                time.sleep(1.0)
        store = service.store
        results = {}
        for name, *_ in JOBS:
            state = store.job(name)
            history = store.history(name)
            first = next(at for at, status, _ in history if status == "running")
            if state.status != "completed":
                raise RuntimeError(f"job {name} ended {state.status}: {state.last_error}")
            results[name] = JobResult(state.restarts, first - state.submitted_at, history[-1][0] - state.submitted_at)
        idle = idle_while_waiting(store, max(history[-1][0] for history in map(store.history, results)))
    finally:
        service.request_shutdown()
        service.wait_stopped(120)
        thread.join(10)
        service.launcher.shutdown()
    return results, idle


THIRTY = 30
ROUND_STOPS = ("checkpointed to move", "preempted after checkpointing")  # a round's reasons for stopping a job


@dataclass(frozen=True)
class BurstResult:
    starts: int
    stops: int  # stops a round made (to move the job or to let others run)
    restarts_per_job: float
    jobs_restarted: int
    most_restarts: int
    shortest_run_before_stop_s: float | None  # from a launch to a round's stop of it
    longest_wait_s: float  # submission to first launch (of the jobs launched)
    drain_s: float | None  # first submission to last completion; None: not drained within the cap
    completed: int
    stops_within_lease: int


def run_thirty(console: Console, interval_s: float, lease_s: float | None, root: Path, cap_s: float) -> BurstResult:
    """The thirty-job burst (module docstring) on a real service, for at most `cap_s`; the numbers from the store's
    history."""
    config = ServiceConfig(
        state_dir=root / "state", policy="pollux", interval_s=interval_s, stop_grace_s=60.0, lease_s=lease_s
    )
    service = Service(config, LocalLauncher(SLOTS, stop_grace_s=60.0))
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    names = [f"j{i:02d}" for i in range(THIRTY)]
    start = time.time()
    try:
        for name in names:
            service.submit(loads_spec(spec_text(name, (0, 64), 3) + "gpus = 1\n", name, REPOSITORY))
        with console.status("thirty jobs running") as status:
            while not all(service.store.job(name).status in FINAL for name in names):
                if time.time() - start > cap_s:
                    break
                done = sum(service.store.job(name).status in FINAL for name in names)
                status.update(f"{done}/{THIRTY} jobs done, {time.time() - start:.0f} s")
                time.sleep(1.0)
        store = service.store
        lease_end = None if lease_s is None else config.restart_delay_s + lease_s
        starts = stops = within = 0
        runs_before_stop, waits, ends, restarts = [], [], [], []
        for name in names:
            state = store.job(name)
            if state.status in FINAL and state.status != "completed":
                raise RuntimeError(f"job {name} ended {state.status}: {state.last_error}")
            history = store.history(name)
            launched = None
            for at, status_now, reason in history:
                if status_now == "running":
                    starts += 1
                    launched = at
                elif launched is not None and any(reason.startswith(r) for r in ROUND_STOPS):
                    stops += 1
                    runs_before_stop.append(at - launched)
                    within += lease_end is not None and at - launched < lease_end
            waits += [next(at for at, s, _ in history if s == "running") - state.submitted_at] if launched else []
            ends += [history[-1][0]] if state.status == "completed" else []
            restarts.append(state.restarts)
    finally:
        service.request_shutdown()
        service.wait_stopped(120)
        thread.join(10)
        service.launcher.shutdown()
    return BurstResult(
        starts=starts,
        stops=stops,
        restarts_per_job=statistics.mean(restarts),
        jobs_restarted=sum(r > 0 for r in restarts),
        most_restarts=max(restarts),
        shortest_run_before_stop_s=min(runs_before_stop, default=None),
        longest_wait_s=max(waits, default=0.0),
        drain_s=max(ends) - start if len(ends) == THIRTY else None,
        completed=len(ends),
        stops_within_lease=within,
    )


def thirty(console: Console, interval_s: float, leases: list[float | None], repeats: int, cap_s: float) -> None:
    table = Table(title=f"{THIRTY} digits_mlp jobs (3 epochs, 1 worker asked) at once on {SLOTS} CPU slots, pollux")
    columns = ("lease", "starts", "stops", "restarts/job", "jobs restarted", "most", "shortest run s", "longest wait s")
    for column in (*columns, "drain s", "stops within lease"):
        table.add_column(column, justify="right")
    for lease in leases:
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="pollux-thirty-") as tmp:
                r = run_thirty(console, interval_s, lease, Path(tmp), cap_s)
            shortest = "-" if r.shortest_run_before_stop_s is None else f"{r.shortest_run_before_stop_s:.1f}"
            table.add_row(
                "none (paper)" if lease is None else f"{lease:g} s",
                str(r.starts),
                str(r.stops),
                f"{r.restarts_per_job:.2f}",
                str(r.jobs_restarted),
                str(r.most_restarts),
                shortest,
                f"{r.longest_wait_s:.0f}",
                f"{r.drain_s:.0f}" if r.drain_s is not None else f"> {cap_s:.0f} ({r.completed} done)",
                str(r.stops_within_lease),
            )
            console.print(f"lease {lease}: done")
    console.print(table)
    console.print(f"Absolute times from this machine ({os.cpu_count()} CPUs), all runs in this process, one by one.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between periodic rounds")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--thirty", action="store_true", help="the burst of thirty small jobs instead")
    parser.add_argument("--lease", type=float, default=LEASE_MIN_RUN_S, help="the runtime's lease (s) for --thirty")
    parser.add_argument("--no-lease", action="store_true", help="--thirty without a lease only (the paper's Pollux)")
    parser.add_argument("--lease-only", action="store_true", help="--thirty with the lease only")
    parser.add_argument("--cap", type=float, default=1800.0, help="--thirty: seconds a run may take before it is cut")
    args = parser.parse_args()
    console = Console()
    if args.thirty:
        leases: list[float | None] = (
            [None] if args.no_lease else [args.lease] if args.lease_only else [None, args.lease]
        )
        thirty(console, args.interval, leases, args.repeats, args.cap)
        return
    runs = []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="pollux-churn-") as tmp:
            runs.append(run_once(console, args.interval, Path(tmp)))
        console.print(f"run {repeat + 1}/{args.repeats} done")
    table = Table(title=f"Churn: 3 digits_mlp jobs, {SLOTS} CPU slots, pollux, rounds every {args.interval:g} s")
    for column in ("job", "workers", "restarts (each run)", "wait to first launch s", "completion s"):
        table.add_column(column, justify="left" if column == "job" else "right")
    for name, workers, *_ in JOBS:
        results = [run[0][name] for run in runs]
        table.add_row(
            name,
            f"{workers[0]}-{workers[1]}",
            " / ".join(str(r.restarts) for r in results),
            " / ".join(f"{r.wait_s:.1f}" for r in results),
            " / ".join(f"{r.jct_s:.0f}" for r in results),
        )
    totals = [sum(r.restarts for r in run[0].values()) for run in runs]
    table.add_row("all", "", " / ".join(map(str, totals)), "", "")
    console.print(table)
    idle = [run[1] for run in runs]
    console.print(
        f"idle slot-seconds while a job waited: {' / '.join(f'{x:.0f}' for x in idle)}; "
        f"restarts per job (mean over runs): {statistics.mean(totals) / len(JOBS):.2f}"
    )


if __name__ == "__main__":
    main()

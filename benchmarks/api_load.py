"""The API under load: 2,000 submissions from 8 concurrent clients to a real `pollux up`, then `ls` and the
dashboard's overview while the jobs queue, and the scheduling rounds over 2,000 pending jobs.

Run: .venv/bin/python -m benchmarks.api_load [--jobs 2000] [--clients 8] [--slots 2] [--polls 20] [--policy pollux]

A real `pollux up` (local backend, `--slots` CPU slots, rounds every second and at every submission) runs in a
temporary state directory on 127.0.0.1; each job is a script that sleeps (no torch), so the slots fill at once and
the rest queue at no cost. Then:

  - submit: `--clients` threads, each with its own `Client`, submit `--jobs` spec files between them; the latency of
    each `Client.submit` (HTTP round trip, spec parsed and stored, the job's row back);
  - ls and overview: `--polls` sequential `GET /v1/jobs` (what `pollux ls` asks) and `GET /v1/dashboard` (what an
    open dashboard asks every second) with all the jobs in the store; and `pollux ls` as a process, three times;
  - rounds with the jobs pending, over `--quiet` seconds without requests (a round every second): a round's time
    from its start (the `at` it records) to its record's commit, seen by polling the store every 20 ms; and the
    service's user+system CPU (/proc) over the window, divided by the rounds it ran;
  - the store: every submitted job in it, none twice.

Goals (issue 27): p99 submit under 100 ms, and a round under 1 s with 2,000 pending, on a 2-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.dashboard import cpu_seconds
from pollux.runtime.client import Client
from pollux.runtime.store import StateStore

REPO = Path(__file__).resolve().parents[1]
SLEEPER = "import time\ntime.sleep(3600)\n"
SUBMIT_P99_GOAL_MS = 100.0
ROUND_GOAL_S = 1.0
STORE_POLL_S = 0.02


@dataclass
class Measured:
    submit_s: list[float] = field(default_factory=list)
    submit_wall_s: float = 0.0
    submit_cpu_s: float = 0.0
    ls_s: list[float] = field(default_factory=list)
    overview_s: list[float] = field(default_factory=list)
    cli_ls_s: list[float] = field(default_factory=list)
    round_s: list[float] = field(default_factory=list)
    round_pending: list[int] = field(default_factory=list)
    quiet_cpu_s: float = 0.0
    quiet_rounds: int = 0
    stored: int = 0
    duplicates: int = 0
    missing: int = 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else float("nan")


def wait_for(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def scheduler(state: Path, log: Path, slots: int, policy: str) -> Iterator[subprocess.Popen[bytes]]:
    """`pollux up` in its own session; stopped with `pollux down` (its jobs then stop too), killed if it hangs."""
    args = ["--slots", str(slots), "--policy", policy, "--interval", "1", "--stop-grace", "5"]
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "pollux", "up", "--state-dir", str(state), *args],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def serving() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"pollux up exited {process.returncode}: see {log}")
            try:
                return json.loads((state / "endpoint.json").read_text())["pid"] == process.pid
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                return False

        wait_for(serving, 120, "pollux up to serve")
        yield process
    finally:
        if process.poll() is None:
            with contextlib.suppress(Exception):
                Client(state).shutdown()
            try:
                process.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def write_specs(folder: Path, count: int) -> list[Path]:
    (folder / "sleeper.py").write_text(SLEEPER)
    specs = []
    for i in range(count):
        spec = folder / f"job-{i:05d}.toml"
        spec.write_text(f'name = "job-{i:05d}"\ncommand = ["python", "sleeper.py"]\ninit_batch_size = 32\n')
        specs.append(spec)
    return specs


def submit_all(state: Path, specs: list[Path], clients: int, m: Measured) -> list[str]:
    """Every spec submitted once, by `clients` threads; the names the service answered with."""
    names: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def client_thread(share: list[Path]) -> None:
        client = Client(state)
        try:
            for spec in share:
                started = time.perf_counter()
                row = client.submit(spec)
                elapsed = time.perf_counter() - started
                with lock:
                    m.submit_s.append(elapsed)
                    names.append(row["name"])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=client_thread, args=(specs[k::clients],)) for k in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    m.submit_wall_s = time.perf_counter() - started
    if errors:
        raise errors[0]
    return names


def timed(action: Callable[[], object], times: int) -> list[float]:
    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return seconds


def cli_ls(state: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pollux", "ls", "--state-dir", str(state)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=120,
    )


def measure(jobs: int, clients: int, slots: int, polls: int, quiet_s: float, policy: str) -> Measured:
    m = Measured()
    with tempfile.TemporaryDirectory(prefix="pollux-api-load-") as folder:
        root = Path(folder)
        state = root / "state"
        specs = write_specs(root, jobs)
        with scheduler(state, root / "up.log", slots, policy) as process:
            client = Client(state)
            client.health()
            cpu = cpu_seconds(process.pid)
            names = submit_all(state, specs, clients, m)
            m.submit_cpu_s = cpu_seconds(process.pid) - cpu

            m.ls_s = timed(client.jobs, polls)
            m.overview_s = timed(lambda: client.request("GET", "/v1/dashboard"), polls)
            m.cli_ls_s = timed(lambda: cli_ls(state), 3)

            store = StateStore(state / "state.db")
            try:
                rounds, cpu = client.health()["rounds"], cpu_seconds(process.pid)
                watch_rounds(store, quiet_s, m)
                m.quiet_rounds = client.health()["rounds"] - rounds
                m.quiet_cpu_s = cpu_seconds(process.pid) - cpu
                stored = [job.name for job in store.jobs()]
            finally:
                store.close()
        m.stored = len(set(stored))
        m.duplicates = len(stored) - len(set(stored)) + len(names) - len(set(names))
        m.missing = len({spec.stem for spec in specs} - set(stored))
    return m


def watch_rounds(store: StateStore, seconds: float, m: Measured) -> None:
    """Each round that ends within `seconds`: from its start to the moment its record is seen in the store."""
    last = store.rounds(1)
    seen = last[-1].at if last else 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        latest = store.rounds(1)
        if latest and latest[-1].at > seen:
            record = latest[-1]
            m.round_s.append(time.time() - record.at)
            m.round_pending.append(record.jobs_pending)
            seen = record.at
        time.sleep(STORE_POLL_S)


def machine() -> str:
    """What the absolute times come from."""
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        "unknown CPU",
    )
    return f"this machine: {os.cpu_count()} cores ({model}), load average {os.getloadavg()[0]:.1f} at the start"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--polls", type=int, default=20)
    parser.add_argument("--quiet", type=float, default=10.0, help="seconds without requests, for CPU per round")
    parser.add_argument("--policy", default="pollux")
    args = parser.parse_args()
    where = machine()
    m = measure(args.jobs, args.clients, args.slots, args.polls, args.quiet, args.policy)

    table = Table(title=f"API load: {args.jobs} jobs from {args.clients} clients, {args.policy}, {args.slots} slots")
    for column in ("measure", "value", "goal", "within"):
        table.add_column(column, justify="left" if column == "measure" else "right")

    def row(label: str, value: float, goal: float | None = None, digits: int = 1) -> None:
        within = "" if goal is None else ("yes" if value < goal else "NO")
        table.add_row(label, f"{value:.{digits}f}", "" if goal is None else f"< {goal:g}", within)

    ms = 1000.0
    row("submit latency p50 (ms)", ms * statistics.median(m.submit_s))
    row("submit latency p99 (ms)", ms * percentile(m.submit_s, 0.99), SUBMIT_P99_GOAL_MS)
    row("submissions per second", len(m.submit_s) / m.submit_wall_s)
    row("service CPU per submission (ms)", ms * m.submit_cpu_s / len(m.submit_s))
    row(f"GET /v1/jobs, {args.jobs} rows, p50 (ms)", ms * statistics.median(m.ls_s))
    row(f"GET /v1/jobs, {args.jobs} rows, p99 (ms)", ms * percentile(m.ls_s, 0.99))
    row("GET /v1/dashboard p50 (ms)", ms * statistics.median(m.overview_s))
    row("GET /v1/dashboard p99 (ms)", ms * percentile(m.overview_s, 0.99))
    row("`pollux ls` process, median (ms)", ms * statistics.median(m.cli_ls_s))
    rounds = m.round_s
    pending = min(m.round_pending, default=0)
    row(
        f"round, {pending}+ pending, median (s)", statistics.median(rounds) if rounds else float("nan"), ROUND_GOAL_S, 2
    )
    row(f"round, {pending}+ pending, worst (s)", max(rounds, default=float("nan")), ROUND_GOAL_S, 2)
    row("service CPU per round, quiet (ms)", ms * m.quiet_cpu_s / max(m.quiet_rounds, 1))
    row("jobs in the store", m.stored, None, 0)
    row("jobs stored twice or missing", m.duplicates + m.missing, 1, 0)
    Console().print(table)
    print(
        f"({len(rounds)} rounds timed, {m.quiet_rounds} run, in {args.quiet:g} s without requests; times from {where})"
    )
    if m.stored != args.jobs or m.duplicates or m.missing:
        sys.exit(f"the store holds {m.stored} of {args.jobs} jobs, {m.duplicates} twice, {m.missing} missing")


if __name__ == "__main__":
    main()

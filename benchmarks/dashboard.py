"""What the dashboard costs with 200 jobs: the browser's first paint, and the service's CPU per poll.

Run: .venv/bin/python -m benchmarks.dashboard [--jobs 200] [--polls 200] [--loads 5]

A state directory is filled as a busy cluster leaves it: 200 jobs on 16 x 4 GPUs (40 running, 40 pending, 120
completed), each running or completed job with an agent report (a fitted goodput model) and 100 goodput samples,
and 500 scheduling rounds. The real API server (`pollux.runtime.api.ApiServer`, the real `Service` on that state;
its scheduling loop does not run, so no job is launched) serves it from a child process. Then:

  - first paint: headless Chromium opens a fresh one-time login link (redirect and cookie included), and the page
    reports when it first painted and when it had drawn the 200 jobs (performance marks, ms after navigation);
  - CPU per poll: the child's user+system CPU time (/proc/PID/stat) over `--polls` sequential GET /v1/dashboard,
    divided by the polls; the poll is what every open dashboard asks for every second.

Bounds (issue 19): first paint < 1 s, CPU per poll < 20 ms.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from rich.console import Console
from rich.table import Table

from benchmarks.headless import Browser
from pollux.agent.report import BatchInUse, JobReport, Progress
from pollux.cluster import Cluster
from pollux.goodput.efficiency import GradientStats
from pollux.goodput.throughput import ThroughputParams
from pollux.runtime.launcher import WorkerInfo
from pollux.runtime.spec import JobSpec
from pollux.runtime.status import JobEvent, JobStatus
from pollux.runtime.store import JobSample, RoundRecord, StateStore

FIRST_PAINT_BOUND_MS = 1000.0
POLL_CPU_BOUND_MS = 20.0
CLUSTER = Cluster(16, 4)


def report(name: str, gpus: int, status: str) -> dict[str, Any]:
    """An agent report with a fitted model, as a job on `gpus` GPUs writes it."""
    return JobReport(
        status=status,
        job_name=name,
        started_at_s=1.0e9,
        written_at_s=1.0e9 + 60,
        init_batch_size=64,
        max_batch_size=1024,
        local_bsz_bounds=(16, 256),
        gradient_accumulation=True,
        adaptive_batch_size=True,
        throughput_params=ThroughputParams(0.02, 0.0008, 0.03, 0.003, 0.12, 0.003, 2.0),
        grad_stats=GradientStats(sqr=1.0, var=5.0),
        batch=BatchInUse(num_nodes=1, num_replicas=max(gpus, 1), local_bsz=96, accum_steps=0),
        progress=Progress(epoch=3, epoch_examples=5120, epoch_size=50000, steps=700, examples=100000, m0_steps=900.5),
        max_replicas_seen=max(gpus, 1),
        throughput_configs=4,
        restarts=0,
    ).to_json_dict()


@dataclass(frozen=True)
class PlannedJob:
    """A job of a filled state: its final status and the GPUs it asks for (kept while it runs)."""

    name: str
    status: JobStatus
    gpus: int = 1


def record_jobs(store: StateStore, plan: Sequence[PlannedJob], cluster: Cluster, now: float) -> None:
    """The jobs of `plan` in submission order, one second apart, as the service leaves them: a running, completed
    or failed job was launched on the first node with free GPUs (as many of its GPUs as fit there) and has an agent
    report and 100 goodput samples; a completed or failed one gave its GPUs back; a cancelled one never ran."""
    free = list(cluster.node_gpus)
    for i, job in enumerate(plan):
        spec = JobSpec(job.name, ("python", "train.py"), 64, 1024, (16, 256))
        store.add_job(spec, now + i)
        if job.status is JobStatus.CANCELLED:
            store.request_cancel(job.name, now + i + 1)
            store.record_exit(job.name, JobEvent.CANCELLED, now + i + 2, "cancelled by the user")
        if job.status in (JobStatus.PENDING, JobStatus.CANCELLED):
            continue
        node = next((n for n, f in enumerate(free) if f), 0)
        gpus = min(job.gpus, free[node]) or 1
        free[node] = max(free[node] - gpus, 0)
        allocation = tuple(gpus if n == node else 0 for n in range(cluster.num_nodes))
        store.record_launch(job.name, allocation, [WorkerInfo(0, node, 10_000 + i, "bench", 1)], now + i + 1, False)
        store.record_report(job.name, report(job.name, gpus, "running"), now + i + 2)
        for k in range(100):
            store.record_sample(job.name, JobSample(now + i + 10 * k, gpus, 96, 0, 96 * gpus, 1000.0 + k, 0.8))
        if job.status is JobStatus.RUNNING:
            continue
        free[node] += gpus
        if job.status is JobStatus.COMPLETED:
            store.record_exit(job.name, JobEvent.FINISHED, now + 1000 + i, "training script finished")
        else:
            error = "Traceback (most recent call last):\nRuntimeError: CUDA error: out of memory"
            store.record_exit(job.name, JobEvent.GAVE_UP, now + 1000 + i, "crashed 3 times", error, crashed=True)


def fill_state(state_dir: Path, num_jobs: int) -> None:
    """The busy cluster's state database (see the module docstring): completed jobs first, then running, then
    pending ones."""
    store = StateStore(state_dir / "state.db")
    now = time.time() - 3600.0
    running = num_jobs // 5
    completed = num_jobs - 2 * running
    statuses = [JobStatus.COMPLETED] * completed + [JobStatus.RUNNING] * running + [JobStatus.PENDING] * running
    plan = [PlannedJob(f"job-{i:03d}", status, 1 + i % 4) for i, status in enumerate(statuses)]
    record_jobs(store, plan, CLUSTER, now)
    for r in range(500):
        decision = {"job": f"job-{r % num_jobs:03d}", "kind": "resize", "gpus_from": 2, "gpus_to": 4, "allocation": []}
        store.record_round(RoundRecord(now + 6 * r, 48 + r % 16, running, running, (decision,) if r % 3 == 0 else ()))
    store.close()


class _IdleLauncher:
    """The cluster, and nothing that could start a process: the benchmark serves a state, it runs no jobs."""

    name = "idle"
    cluster = CLUSTER


def serve(state_dir: Path, ready: Any) -> None:
    """The child: the real Service and ApiServer on the filled state, until terminated."""
    from pollux.runtime.api import ApiServer
    from pollux.runtime.client import write_endpoint, write_token
    from pollux.runtime.launcher import Launcher
    from pollux.runtime.service import Service, ServiceConfig

    service = Service(ServiceConfig(state_dir=state_dir), cast(Launcher, _IdleLauncher()))
    api = ApiServer(service, write_token(state_dir))
    api.start()
    write_endpoint(state_dir, api.url)
    ready.send(api.url)
    while True:
        time.sleep(3600)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get(url: str, token: str) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return bytes(response.read())


def link(base: str, token: str) -> str:
    request = urllib.request.Request(
        base + "/v1/dashboard/link", method="POST", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.loads(response.read())["url"])


def measure(num_jobs: int, polls: int, loads: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="pollux-dashboard-bench-") as folder:
        state = Path(folder) / "state"
        state.mkdir(mode=0o700)
        fill_state(state, num_jobs)
        context = multiprocessing.get_context("spawn")
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=serve, args=(state, send), daemon=True)
        child.start()
        try:
            base = receive.recv()
            token = (state / "token").read_text().strip()
            payload = get(base + "/v1/dashboard", token)  # warm: imports, the page's assets
            assert len(json.loads(payload)["jobs"]) == num_jobs
            before = cpu_seconds(child.pid or 0)
            started = time.perf_counter()
            for _ in range(polls):
                get(base + "/v1/dashboard", token)
            wall = time.perf_counter() - started
            cpu = cpu_seconds(child.pid or 0) - before
            paints, drawn = [], []
            with Browser() as browser:
                for _ in range(loads):
                    browser.open(link(base, token))
                    browser.wait_for("document.body.dataset.ready === '1'", what="the dashboard's first data")
                    rows = browser.evaluate("document.querySelectorAll('#jobs-body tr').length")
                    assert rows == num_jobs, rows
                    paint = "performance.getEntriesByName('first-contentful-paint')[0]?.startTime"
                    paints.append(browser.wait_for(paint, what="the first paint's entry (it may follow the data)"))
                    drawn.append(browser.evaluate("performance.getEntriesByName('pollux-data-drawn')[0].startTime"))
        finally:
            child.terminate()
            child.join(10)
    return {
        "payload_kb": len(payload) / 1024,
        "poll_cpu_ms": 1000 * cpu / polls,
        "poll_wall_ms": 1000 * wall / polls,
        "first_paint_ms": statistics.median(paints),
        "first_paint_max_ms": max(paints),
        "drawn_ms": statistics.median(drawn),
        "drawn_max_ms": max(drawn),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--polls", type=int, default=200)
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args()
    m = measure(args.jobs, args.polls, args.loads)
    table = Table(title=f"Dashboard with {args.jobs} jobs on {CLUSTER.describe()} (this machine, loopback)")
    for column in ("measure", "value", "bound", "within"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    rows = [
        ("first contentful paint, median (ms)", m["first_paint_ms"], FIRST_PAINT_BOUND_MS),
        ("first contentful paint, worst (ms)", m["first_paint_max_ms"], FIRST_PAINT_BOUND_MS),
        (f"{args.jobs} jobs drawn, median (ms)", m["drawn_ms"], FIRST_PAINT_BOUND_MS),
        (f"{args.jobs} jobs drawn, worst (ms)", m["drawn_max_ms"], FIRST_PAINT_BOUND_MS),
        ("service CPU per poll (ms)", m["poll_cpu_ms"], POLL_CPU_BOUND_MS),
        ("wall time per poll (ms)", m["poll_wall_ms"], None),
        ("poll payload (KiB)", m["payload_kb"], None),
    ]
    for label, value, bound in rows:
        within = "" if bound is None else ("yes" if value < bound else "NO")
        table.add_row(label, f"{value:.1f}", "" if bound is None else f"< {bound:.0f}", within)
    Console().print(table)
    print(f"({args.polls} polls, {args.loads} page loads; CPU from /proc of the serving process)")


if __name__ == "__main__":
    main()

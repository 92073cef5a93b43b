"""Runtime overhead on the local backend: submit → first training step, and the pause a job sees at a rescale.

Run: .venv/bin/python -m benchmarks.runtime_overhead [--repeats 3]

A real service (local launcher, CPU slots, HTTP API) runs a small Pollux-agent job (an MLP on random data, gloo)
whose rank 0 appends the wall-clock time of every optimizer step to a file. "submit → first step" is measured from
just before the client's POST to the first recorded step, over fresh jobs. "rescale pause" drives the service's own
resize path (the decisions a round would hand to the launcher: SIGTERM, checkpoint, relaunch at the new world size)
and measures the gap between the last step before and the first step after; it is split into "stop" (SIGTERM until
the old group has exited, checkpoint included) and "restart" (launch until the first step: interpreter, torch import,
process group, checkpoint restore). Most of a restart is Python and torch start-up, paid once per worker.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pollux.engine import Decision
from pollux.runtime.api import ApiServer
from pollux.runtime.client import Client, write_endpoint, write_token
from pollux.runtime.local import LocalLauncher
from pollux.runtime.service import Service, ServiceConfig

JOB = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import pollux.agent as pa

    torch.set_num_threads(1)
    pa.init_process_group("gloo")
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 32), torch.randint(0, 4, (4096,)))
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    ddp = pa.AdaptiveDataParallel(model, optimizer)
    loader = pa.AdaptiveDataLoader(data, batch_size=32, shuffle=True)
    steps = open(sys.argv[1], "a") if int(os.environ["RANK"]) == 0 else None
    for epoch in pa.remaining_epochs_until(10_000):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            optimizer.step()
            if steps:
                steps.write(f"{time.time()} {os.environ['WORLD_SIZE']}\\n")
                steps.flush()
            time.sleep(0.01)
    """
)


def step_times(path: Path) -> list[tuple[float, int]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            rows.append((float(parts[0]), int(parts[1])))
    return rows


def wait(service: Service, condition: Callable[[], object], timeout: float = 120.0) -> None:
    """Run the service's loop on this thread until `condition()` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark job did not make progress in time")
        service.step()
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory(prefix="pollux-runtime-bench-") as tmp:
        root = Path(tmp)
        (root / "job.py").write_text(JOB)
        # rounds only on events: the benchmark's own resizes are not undone by FIFO's next round
        config = ServiceConfig(state_dir=root / "state", policy="fifo", interval_s=3600.0, tick_s=0.02)
        service = Service(config, LocalLauncher(2, stop_grace_s=30.0))
        server = ApiServer(service, write_token(config.state_dir))
        server.start()
        write_endpoint(config.state_dir, server.url)
        service.recover()
        client = Client(config.state_dir)
        try:
            first_step, stops, restarts, pauses = [], [], [], []
            for index in range(args.repeats):
                name = f"bench-{index}"
                log = root / f"{name}.steps"
                spec = root / f"{name}.toml"
                spec.write_text(
                    f'name = "{name}"\ncommand = ["python", "job.py", "{log}"]\ninit_batch_size = 32\ngpus = 1\n'
                )
                submitted = time.time()
                client.submit(spec)
                wait(service, lambda log=log: step_times(log))
                first_step.append(step_times(log)[0][0] - submitted)
                for size in (2, 1):
                    before = len(step_times(log))
                    # what a round hands the backend when the policy resizes the job
                    decision = Decision(name, "resize", (size,), gpu_type=service.launcher.cluster.gpu_types[0])
                    service.scheduler.backend.apply([decision], time.time())
                    relaunched = time.time()
                    wait(service, lambda log=log, size=size, n=before: any(w == size for _, w in step_times(log)[n:]))
                    rows = step_times(log)
                    last_old = max(t for t, w in rows[:before])
                    first_new = next(t for t, w in rows[before:] if w == size)
                    pauses.append(first_new - last_old)
                    stops.append(max(relaunched - last_old, 0.0))  # apply returned: old group gone, new one started
                    restarts.append(first_new - relaunched)
                client.cancel(name)
                wait(service, lambda name=name: client.job(name)["status"] == "cancelled")
        finally:
            service.request_shutdown()
            service.run()  # stops what still runs, closes the store
            server.close()
            service.launcher.shutdown()
    table = Table(title=f"Runtime overhead, local backend, CPU slots ({args.repeats} jobs, {len(pauses)} rescales)")
    for column in ("measure", "median s", "min s", "max s"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    for label, values in (
        ("submit -> first training step", first_step),
        ("rescale pause (last step -> first step at new size)", pauses),
        ("  of which stop (SIGTERM -> checkpointed and exited)", stops),
        ("  of which restart (launch -> first step)", restarts),
    ):
        table.add_row(label, f"{statistics.median(values):.2f}", f"{min(values):.2f}", f"{max(values):.2f}")
    console.print(table)


if __name__ == "__main__":
    main()

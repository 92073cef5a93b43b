"""Agent overhead: step time of a small CNN under plain DDP vs. under the Pollux agent, 2 processes, CPU/gloo.

Run: .venv/bin/python -m benchmarks.agent_overhead [--steps 30] [--rounds 15] [--local-bsz 32]

Both sides train the same CNN (examples/cifar_like_cnn.py) on the same synthetic images with SGD, 2 processes of one
thread each. "agent, fixed batch" adds what every step pays: the elastic loader's bookkeeping, a hook per parameter
(timing, local gradient norm), the averaged gradient's norm and the noise-scale update, a small all-reduce of the
statistics every 4 steps, and the LR scaling. "agent, autoscaling" also
refits the throughput model, re-decides the batch (bounds pin it to the same size, so the arithmetic stays
comparable) every `--adapt-interval` steps, and keeps its report file current. Configurations alternate within each
round; the overheads are medians over rounds of the ratio to plain DDP in the same round, so load from other
processes on the host largely cancels. CPU time (both processes, all threads) is the steadier yardstick of the
agent's own work; wall time is what a job sees.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rich.console import Console
from rich.table import Table

import pollux.agent as pa

CONFIGS = ("plain DDP", "agent, fixed batch", "agent, autoscaling")
WORLD_SIZE = 2
WARMUP_STEPS = 5


@dataclass(frozen=True)
class Timing:
    wall_s: float  # per step
    cpu_s: float  # per step, both processes together


def small_cnn() -> torch.nn.Module:
    """The model of examples/cifar_like_cnn.py (loaded from its file: examples/ is not a package)."""
    path = Path(__file__).resolve().parents[1] / "examples" / "cifar_like_cnn.py"
    spec = importlib.util.spec_from_file_location("cifar_like_cnn", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example.small_cnn()


def images(count: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(0)
    return torch.utils.data.TensorDataset(torch.randn(count, 3, 32, 32, generator=g), torch.randint(0, 10, (count,)))


def timed_steps(batches: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> Timing:
    """Wall and CPU seconds per optimizer step over `steps` steps after a warm-up (barriers so both ranks are in
    the span; CPU time is this process's, all threads, summed over both ranks)."""
    it = iter(batches)
    for i in range(WARMUP_STEPS + steps):
        if i == WARMUP_STEPS:
            dist.barrier()
            start, cpu_start = time.perf_counter(), time.process_time()
        x, y = next(it)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    dist.barrier()
    wall, cpu = time.perf_counter() - start, torch.tensor([time.process_time() - cpu_start])
    if hasattr(it, "close"):
        it.close()
    dist.all_reduce(cpu)
    return Timing(wall / steps, float(cpu) / steps)


def plain_ddp(data: torch.utils.data.Dataset[Any], args: argparse.Namespace) -> Timing:
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(small_cnn())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sampler = torch.utils.data.DistributedSampler(data, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(data, batch_size=args.local_bsz, sampler=sampler)
    return timed_steps(loader, model, optimizer, args.steps)


def with_agent(data: torch.utils.data.Dataset[Any], args: argparse.Namespace, autoscale: bool) -> Timing:
    with tempfile.TemporaryDirectory() as tmp:
        agent = pa.init_process_group("gloo", report_path=Path(tmp) / "report.json")  # joins the existing group
        torch.manual_seed(0)
        net = small_cnn()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        model = pa.AdaptiveDataParallel(net, optimizer, scaling_rule=pa.AdaScale())
        loader = pa.AdaptiveDataLoader(data, batch_size=args.local_bsz * WORLD_SIZE, shuffle=True)
        if autoscale:
            bounds = (args.local_bsz, args.local_bsz)
            loader.autoscale_batch_size(loader.batch_size, bounds, adapt_interval_steps=args.adapt_interval)
        try:
            return timed_steps(loader, model, optimizer, args.steps)
        finally:
            agent.close()


def worker(rank: int, port: int, args: argparse.Namespace, results: Any) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(WORLD_SIZE), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK="0"
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    data = images((WARMUP_STEPS + args.steps) * args.local_bsz * WORLD_SIZE)
    runs = {
        "plain DDP": lambda: plain_ddp(data, args),
        "agent, fixed batch": lambda: with_agent(data, args, autoscale=False),
        "agent, autoscaling": lambda: with_agent(data, args, autoscale=True),
    }
    times: dict[str, list[Timing]] = {name: [] for name in CONFIGS}
    for round_index in range(args.rounds):
        order = CONFIGS[round_index % 3 :] + CONFIGS[: round_index % 3]
        for name in order:
            times[name].append(runs[name]())
    if rank == 0:
        results.put(times)
    dist.destroy_process_group()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per configuration and round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--local-bsz", type=int, default=32, help="examples per process and step")
    parser.add_argument("--adapt-interval", type=int, default=25, help="steps between batch-size decisions")
    args = parser.parse_args()

    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(worker, args=(free_port(), args, results), nprocs=WORLD_SIZE, start_method="spawn")
    times = results.get()

    table = Table(
        title=f"Agent overhead: small CNN, {WORLD_SIZE} processes (gloo, CPU, 1 thread each), {args.local_bsz} images "
        f"per process and step; medians of {args.rounds} rounds × {args.steps} steps"
    )
    columns = ("configuration", "wall ms / step", "overhead (wall)", "CPU ms / step", "overhead (CPU)")
    for name in columns:
        table.add_column(name, justify="left" if name == "configuration" else "right")
    plain = times["plain DDP"]
    for name in CONFIGS:
        runs = times[name]
        # overhead: median over rounds of the ratio to plain DDP in the same round (load from other processes
        # drifts slowly, so pairing cancels most of it)
        wall_ratio = statistics.median(r.wall_s / p.wall_s for r, p in zip(runs, plain, strict=True))
        cpu_ratio = statistics.median(r.cpu_s / p.cpu_s for r, p in zip(runs, plain, strict=True))
        table.add_row(
            name,
            f"{1e3 * statistics.median(r.wall_s for r in runs):.2f}",
            "—" if name == "plain DDP" else f"{100 * (wall_ratio - 1):+.1f}%",
            f"{1e3 * statistics.median(r.cpu_s for r in runs):.2f}",
            "—" if name == "plain DDP" else f"{100 * (cpu_ratio - 1):+.1f}%",
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()

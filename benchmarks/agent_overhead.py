"""Agent overhead: step time of a small CNN under plain DDP vs. under the Pollux agent, 2 processes, CPU/gloo.

Run: .venv/bin/python -m benchmarks.agent_overhead [--step 20 10] [--steps 30] [--rounds 15] [--profile]
     [--device cuda] [--world-size 1]

Both sides train the same CNN (examples/cifar_like_cnn.py) on the same synthetic images with SGD, 2 processes of one
thread each. Two step sizes: `--step 20` (32 images per process and step, about 20 ms per plain DDP step on a quiet
2-core machine) and `--step 10` (12 images, about 10 ms), where a fixed per-step cost weighs twice as much.
"agent, fixed batch" adds what every step pays: the elastic loader's bookkeeping, a hook per parameter (timing),
the local and averaged gradients' squared norms, the statistics' all-reduce and noise-scale update every 4 steps,
and the LR scaling. "agent, autoscaling" also refits the throughput model, re-decides the batch (bounds pin it to
the same size, so the arithmetic stays comparable) every `--adapt-interval` steps, and keeps its report file current.
Configurations alternate within each round (their order rotates from round to round); the overheads are medians over
rounds of the ratio to plain DDP in the same round, so load from other processes on the host largely cancels. CPU
time (both processes, all threads) is the steadier yardstick of the agent's own work; wall time is what a job sees.

`--profile` also times the agent's own functions (rank 0, exclusive of what they call: the model's forward and
backward, the optimizer's update and the data loading are not the agent's) by wrapping them for the agent runs only,
and prints microseconds per step by part. The wrappers cost about a microsecond per call themselves, so a profiled
run's times are not the overhead figures: those come from a run without `--profile`.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from rich.console import Console
from rich.table import Table
from torch.nn.parallel import DistributedDataParallel

import pollux.agent as pa

CONFIGS = ("plain DDP", "agent, fixed batch", "agent, autoscaling")
AGENT_CONFIGS = CONFIGS[1:]
# --step: images per process and step that give a plain DDP step of about that many ms (quiet 2-core machine, CPU)
LOCAL_BSZ_BY_STEP_MS = {20: 32, 10: 12}
WARMUP_STEPS = 5

# The agent's per-step path, by part: "module:Qualified.name" (timed exclusive of any other entry in this table).
# "not agent" entries are the work plain DDP does too; they are timed only to be subtracted from their callers (and
# the optimizer's step and zero_grad, torch's wrappers around them included: with_agent times them on the instance).
# The background part runs on rank 0's worker thread, beside the training thread, not in it.
NOT_AGENT = "not agent"
PARTS = {
    "pollux.agent.steps:StepTracker.begin_micro": "loader bookkeeping",
    "pollux.agent.steps:StepTracker.end_micro": "loader bookkeeping",
    "pollux.agent.data:plan_micro_batches": "loader bookkeeping",
    "pollux.agent.parallel:AdaptiveDataParallel.forward": "forward / zero_grad wrappers",
    "pollux.agent.parallel:AdaptiveDataParallel._zero_grad": "forward / zero_grad wrappers",
    "pollux.agent.gradients:GradientMeter._on_grad": "gradient hooks",
    "pollux.agent.parallel:AdaptiveDataParallel._step": "LR scaling, step bookkeeping",
    "pollux.agent.scaling:AdaScale.lr_factor": "LR scaling, step bookkeeping",
    "pollux.agent.parallel:AdaptiveDataParallel._measure": "gradient norms",
    "pollux.agent.gradients:GradientMeter.take_local_norms": "gradient norms",
    "pollux.agent.gradients:GradientMeter.preconditioned_grads": "gradient norms",
    "pollux.agent.gradients:GradientMeter.step_sqr_norms": "gradient norms",
    "pollux.agent.gradients:GradientMeter.consecutive_pair": "gradient norms",
    "pollux.agent.gradients:GradientMeter._weighted_squares": "gradient norms",
    "pollux.agent.gradients:GradientMeter._refresh_preconditioner": "gradient norms",
    "pollux.agent.gns:NoiseScaleEstimator.update": "noise-scale update",
    "pollux.agent.gns:NoiseScaleEstimator.grad_stats": "noise-scale update",
    "pollux.agent.exchange:StatisticsExchange.add_step": "statistics all-reduce",
    "pollux.agent.exchange:StatisticsExchange._complete": "statistics all-reduce",
    "pollux.agent.exchange:StatisticsExchange._close_window": "statistics all-reduce",
    "pollux.agent.exchange:StatisticsExchange._read_back": "statistics all-reduce",
    "pollux.agent.context:AgentContext.checkpoint_due": "checkpoint-due check",
    "pollux.agent.context:AgentContext._periodic_checkpoint_agreed": "checkpoint-due check",
    "pollux.agent.context:AgentContext.after_step": "after-step bookkeeping",
    "pollux.goodput.log:ThroughputLog.record": "after-step bookkeeping",
    "pollux.agent.context:AgentContext.decide_batch": "batch decision (+ broadcast)",
    "pollux.agent.context:AgentContext.refit_throughput": "throughput refit",
    "pollux.agent.context:AgentContext.start_refit": "throughput refit",
    "pollux.agent.context:AgentContext.collect_refit": "throughput refit",
    "pollux.agent.context:AgentContext.write_report": "report writing",
    "pollux.agent.context:fit_measured": "fits, report files (background)",
    "pollux.agent.context:write_report": "fits, report files (background)",
    "torch.nn.parallel:DistributedDataParallel.forward": NOT_AGENT,
    "torch.utils.data.dataloader:_BaseDataLoaderIter.__next__": NOT_AGENT,
}


@dataclass(frozen=True)
class Timing:
    wall_s: float  # per step
    cpu_s: float  # per step, all processes together


@dataclass(frozen=True)
class Setup:
    """One step size's workload."""

    step_ms: int
    local_bsz: int
    data: torch.utils.data.Dataset[Any]


class Profile:
    """Wall and CPU (this thread's) nanoseconds per part, each call timed exclusive of the timed calls it makes (a
    stack per thread: on a GPU, autograd runs the gradient hooks on its own thread). On a loaded host, wall time
    includes the time the process waited for a core; CPU time does not, nor the waits for other ranks."""

    def __init__(self) -> None:
        self.wall_ns: dict[str, int] = defaultdict(int)
        self.cpu_ns: dict[str, int] = defaultdict(int)
        self.steps = 0
        self._local = threading.local()

    def timed(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            stack = self._local.__dict__.setdefault("stack", [])
            stack.append([0, 0])
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu, wall = time.thread_time_ns() - cpu, time.perf_counter_ns() - wall
                child_wall, child_cpu = stack.pop()
                self.wall_ns[part] += wall - child_wall
                self.cpu_ns[part] += cpu - child_cpu
                if stack:
                    stack[-1][0] += wall
                    stack[-1][1] += cpu

        return call

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Every function of PARTS wrapped (before the agent is built: hooks bind their methods then)."""
        undo = []
        for target, part in PARTS.items():
            module_name, qualname = target.split(":")
            *owner_path, attr = qualname.split(".")
            owner: Any = importlib.import_module(module_name)
            for name in owner_path:
                owner = getattr(owner, name)
            original = owner.__dict__[attr]
            if isinstance(original, staticmethod):
                setattr(owner, attr, staticmethod(self.timed(part, original.__func__)))
            else:
                setattr(owner, attr, self.timed(part, original))
            undo.append((owner, attr, original))
        try:
            yield
        finally:
            for owner, attr, original in reversed(undo):
                setattr(owner, attr, original)


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


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_steps(
    batches: Any,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    steps: int,
    device: torch.device,
    profile: Profile | None = None,
) -> Timing:
    """Wall and CPU seconds per optimizer step over `steps` steps after a warm-up (barriers so all ranks are in
    the span; CPU time is this process's, all threads, summed over the ranks). With a profile, the loader's own
    code between batches counts as its bookkeeping."""
    it = iter(batches)
    next_batch = next if profile is None else profile.timed("loader bookkeeping", next)
    for i in range(WARMUP_STEPS + steps):
        if i == WARMUP_STEPS:
            synchronize(device)
            dist.barrier()
            start, cpu_start = time.perf_counter(), time.process_time()
        x, y = next_batch(it)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    synchronize(device)
    dist.barrier()
    wall, cpu = time.perf_counter() - start, torch.tensor([time.process_time() - cpu_start])
    if hasattr(it, "close"):
        it.close()
    dist.all_reduce(cpu)
    return Timing(wall / steps, float(cpu) / steps)


def device_ids(device: torch.device) -> list[int] | None:
    return None if device.type == "cpu" else [device.index or 0]


def plain_ddp(setup: Setup, args: argparse.Namespace, device: torch.device) -> Timing:
    torch.manual_seed(0)
    model = DistributedDataParallel(small_cnn().to(device), device_ids=device_ids(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sampler: torch.utils.data.DistributedSampler[Any] = torch.utils.data.DistributedSampler(
        setup.data, shuffle=True, seed=0
    )
    loader = torch.utils.data.DataLoader(setup.data, batch_size=setup.local_bsz, sampler=sampler)
    return timed_steps(loader, model, optimizer, args.steps, device)


def with_agent(
    setup: Setup, args: argparse.Namespace, device: torch.device, autoscale: bool, profile: Profile | None
) -> Timing:
    world_size = dist.get_world_size()
    with tempfile.TemporaryDirectory() as tmp:
        agent = pa.init_process_group("gloo", report_path=Path(tmp) / "report.json")  # joins the existing group
        torch.manual_seed(0)
        net = small_cnn().to(device)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        if profile is not None:  # the optimizer's own methods, torch's wrappers around them included, are not the agent
            optimizer.step = profile.timed(NOT_AGENT, optimizer.step)  # type: ignore[method-assign]
            optimizer.zero_grad = profile.timed(NOT_AGENT, optimizer.zero_grad)  # type: ignore[method-assign]
        model = pa.AdaptiveDataParallel(net, optimizer, scaling_rule=pa.AdaScale(), device_ids=device_ids(device))
        loader = pa.AdaptiveDataLoader(setup.data, batch_size=setup.local_bsz * world_size, shuffle=True)
        if autoscale:
            bounds = (setup.local_bsz, setup.local_bsz)
            loader.autoscale_batch_size(loader.batch_size, bounds, adapt_interval_steps=args.adapt_interval)
        try:
            return timed_steps(loader, model, optimizer, args.steps, device, profile)
        finally:
            agent.close()


def worker(rank: int, port: int, args: argparse.Namespace, results: Any) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(args.world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        LOCAL_RANK="0",
    )
    torch.set_num_threads(1)
    device = torch.device(args.device)
    dist.init_process_group("gloo", init_method="env://")
    examples = (WARMUP_STEPS + args.steps) * args.world_size
    setups = [Setup(ms, LOCAL_BSZ_BY_STEP_MS[ms], images(examples * LOCAL_BSZ_BY_STEP_MS[ms])) for ms in args.step]
    profiles = {(s.step_ms, name): Profile() for s in setups for name in AGENT_CONFIGS}
    times: dict[tuple[int, str], list[Timing]] = {(s.step_ms, name): [] for s in setups for name in CONFIGS}
    for round_index in range(args.rounds):
        order = CONFIGS[round_index % 3 :] + CONFIGS[: round_index % 3]
        for setup in setups:
            for name in order:
                if name == "plain DDP":
                    times[setup.step_ms, name].append(plain_ddp(setup, args, device))
                    continue
                autoscale = name == "agent, autoscaling"
                if not args.profile:
                    times[setup.step_ms, name].append(with_agent(setup, args, device, autoscale, None))
                    continue
                profile = profiles[setup.step_ms, name]
                with profile.installed():
                    times[setup.step_ms, name].append(with_agent(setup, args, device, autoscale, profile))
                profile.steps += WARMUP_STEPS + args.steps
    if rank == 0:
        results.put((times, {key: (dict(p.wall_ns), dict(p.cpu_ns), p.steps) for key, p in profiles.items()}))
    dist.destroy_process_group()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def overhead_table(times: dict[tuple[int, str], list[Timing]], args: argparse.Namespace) -> Table:
    table = Table(
        title=f"Agent overhead: small CNN, {args.world_size} processes (gloo, {args.device}, 1 thread each); "
        f"medians of {args.rounds} rounds × {args.steps} steps"
        + ("; PROFILED (wrappers inflate the agent's times)" if args.profile else "")
    )
    columns = ("step", "configuration", "wall ms / step", "overhead (wall)", "CPU ms / step", "overhead (CPU)")
    for name in columns:
        table.add_column(name, justify="left" if name in ("step", "configuration") else "right")
    for ms in args.step:
        plain = times[ms, "plain DDP"]
        for name in CONFIGS:
            runs = times[ms, name]
            # overhead: median over rounds of the ratio to plain DDP in the same round (load from other processes
            # drifts slowly, so pairing cancels most of it)
            wall_ratio = statistics.median(r.wall_s / p.wall_s for r, p in zip(runs, plain, strict=True))
            cpu_ratio = statistics.median(r.cpu_s / p.cpu_s for r, p in zip(runs, plain, strict=True))
            table.add_row(
                f"{ms} ms ({LOCAL_BSZ_BY_STEP_MS[ms]} images)" if name == "plain DDP" else "",
                name,
                f"{1e3 * statistics.median(r.wall_s for r in runs):.2f}",
                "—" if name == "plain DDP" else f"{100 * (wall_ratio - 1):+.1f}%",
                f"{1e3 * statistics.median(r.cpu_s for r in runs):.2f}",
                "—" if name == "plain DDP" else f"{100 * (cpu_ratio - 1):+.1f}%",
            )
    return table


def profile_table(profiles: dict[tuple[int, str], tuple[dict[str, int], dict[str, int], int]], args: Any) -> Table:
    table = Table(
        title="Where the agent's time goes: µs per step on rank 0 (CPU / wall), exclusive of what each part calls"
    )
    keys = [(ms, name) for ms in args.step for name in AGENT_CONFIGS]
    table.add_column("part")
    for ms, name in keys:
        table.add_column(f"{ms} ms, {name.removeprefix('agent, ')}", justify="right")
    parts = [*dict.fromkeys(p for p in PARTS.values() if p != NOT_AGENT), "agent, total"]
    cells: dict[str, list[str]] = {part: [] for part in parts}
    for key in keys:
        wall_ns, cpu_ns, steps = profiles[key]
        for part in parts:
            if part == "agent, total":
                cpu, wall = (sum(v for p, v in ns.items() if p != NOT_AGENT) for ns in (cpu_ns, wall_ns))
            else:
                cpu, wall = cpu_ns.get(part, 0), wall_ns.get(part, 0)
            cells[part].append(f"{cpu / 1e3 / max(steps, 1):.1f} / {wall / 1e3 / max(steps, 1):.1f}")
    for part in parts:
        table.add_row(part, *cells[part])
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", type=int, nargs="+", choices=sorted(LOCAL_BSZ_BY_STEP_MS), default=[20, 10])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per configuration and round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--adapt-interval", type=int, default=25, help="steps between batch-size decisions")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (every process on the one GPU)")
    parser.add_argument("--world-size", type=int, default=2, help="processes")
    parser.add_argument("--profile", action="store_true", help="also print where the agent's time goes")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")

    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(worker, args=(free_port(), args, results), nprocs=args.world_size, start_method="spawn")
    times, profiles = results.get()
    console = Console(width=160)
    console.print(overhead_table(times, args))
    if args.profile:
        console.print(profile_table(profiles, args))


if __name__ == "__main__":
    main()

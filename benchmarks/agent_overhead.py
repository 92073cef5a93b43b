"""Agent overhead: step time of a small CNN under plain DDP vs. under the Pollux agent, 2 processes, CPU/gloo.

Run: .venv/bin/python -m benchmarks.agent_overhead [--step 20 10] [--steps 200] [--rounds 15] [--profile]
     [--device cuda] [--world-size 1]

Both sides train the same CNN (examples/cifar_like_cnn.py) on the same synthetic images with SGD, 2 processes of one
thread each. Two step sizes: `--step 20` (32 images per process and step, about 20 ms per plain DDP step on a quiet
2-core machine) and `--step 10` (12 images, about 10 ms), where a fixed per-step cost weighs twice as much.
"agent, fixed batch" adds what every step pays: the elastic loader's bookkeeping, a hook per parameter (timing), the
local and averaged gradients' squared norms (one step in 4), the statistics' all-reduce and noise-scale update (once per
exchange window, about 0.2 s), and the LR scaling. "agent, autoscaling" also refits the throughput model, re-decides the
batch (bounds pin it to the same size, so the arithmetic stays comparable) every `--adapt-interval` steps, and keeps its
report file current.
Each round runs every agent configuration beside plain DDP in one process, the two taking turns in blocks of
`--block` steps, so load from other processes on the host, which drifts over seconds, falls on both alike; the
overheads are medians over rounds of the agent's time over plain DDP's in the same run. CPU time (both processes, all
threads) is the steadier yardstick of the agent's own work; wall time is what a job sees. Beside each median, the
quartiles of the per-round ratios show how far one round can stray on this host.

What is timed is a job in its steady state. Every run starts a fresh agent, and a fresh agent pays once per
incarnation for what a running job does not pay again: the thread that fits and writes reports starts, the first
throughput fit starts from scratch (a warm refit, every 5 s after, costs a fraction of it) and the first report is
built. The warm-up therefore spans the first batch decision (`--adapt-interval` steps) and a few steps more, so these
fall in it; the "start-up" column is what the warm-up cost beyond plain DDP's, in ms per run. The timed steps then
include what a running job pays periodically: statistics exchanges, batch decisions, report writes (every 2 s).

`--profile` also times the agent's own functions (rank 0, exclusive of what they call: the model's forward and
backward, the optimizer's update and the data loading are not the agent's) by wrapping them for the agent runs only,
and prints microseconds per step by part, over the timed steps only (what a run's warm-up pays once is its start-up;
the first fit of a process also imports scipy, half a second). The wrappers cost about a microsecond per call
themselves, so a profiled run's times are not the overhead figures: those come from a run without `--profile`.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import math
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

AGENT_CONFIGS = ("agent, fixed batch", "agent, autoscaling")  # each timed beside plain DDP
# --step: images per process and step that give a plain DDP step of about that many ms (quiet 2-core machine, CPU)
LOCAL_BSZ_BY_STEP_MS = {20: 32, 10: 12}
WARMUP_AFTER_FIRST_DECISION = 5  # steps of warm-up after the first batch decision (its fit and report finish then)

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
    wall_s: float  # per timed step
    cpu_s: float  # per timed step, all processes together
    warmup_wall_s: float  # the whole warm-up


def warmup_steps(args: argparse.Namespace) -> int:
    return args.adapt_interval + WARMUP_AFTER_FIRST_DECISION


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
        self.recording = False  # only the timed steps count, as in the overhead figures: not a run's warm-up
        self._local = threading.local()

    def timed(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            stack = self._local.__dict__.setdefault("stack", [])
            stack.append([0, 0])
            recording = self.recording  # a call belongs to when it started: a warm-up's fit may end in timed steps
            wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu, wall = time.thread_time_ns() - cpu, time.perf_counter_ns() - wall
                child_wall, child_cpu = stack.pop()
                if recording:
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


class Loop:
    """One model's training loop, run a block of steps at a time. The next batch is fetched at the end of each step
    (so an AdaptiveDataLoader's step-boundary work, which runs when the next batch is asked for, belongs to the block
    of the step it follows)."""

    def __init__(
        self,
        batches: Any,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        profile: Profile | None = None,
    ) -> None:
        self.model, self.optimizer, self.device = model, optimizer, device
        self._it = iter(batches)
        # with a profile, the loader's own code between batches counts as its bookkeeping
        self._next = next if profile is None else profile.timed("loader bookkeeping", next)
        self._batch = self._next(self._it)

    def run(self, steps: int) -> None:
        for _ in range(steps):
            x, y = self._batch
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            self.optimizer.zero_grad()
            torch.nn.functional.cross_entropy(self.model(x), y).backward()
            self.optimizer.step()
            self._batch = self._next(self._it)

    def close(self) -> None:
        if hasattr(self._it, "close"):
            self._it.close()


def timed(loop: Loop, steps: int) -> tuple[float, float]:
    """Wall and CPU seconds (this process, all threads) of `steps` steps, between barriers so all ranks are in it."""
    synchronize(loop.device)
    dist.barrier()
    wall, cpu = time.perf_counter(), time.process_time()
    loop.run(steps)
    synchronize(loop.device)
    dist.barrier()
    return time.perf_counter() - wall, time.process_time() - cpu


def device_ids(device: torch.device) -> list[int] | None:
    return None if device.type == "cpu" else [device.index or 0]


def plain_loop(setup: Setup, device: torch.device) -> Loop:
    torch.manual_seed(0)
    model = DistributedDataParallel(small_cnn().to(device), device_ids=device_ids(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sampler: torch.utils.data.DistributedSampler[Any] = torch.utils.data.DistributedSampler(
        setup.data, shuffle=True, seed=0
    )
    return Loop(
        torch.utils.data.DataLoader(setup.data, batch_size=setup.local_bsz, sampler=sampler), model, optimizer, device
    )


def agent_loop(
    setup: Setup, args: argparse.Namespace, device: torch.device, autoscale: bool, profile: Profile | None
) -> Loop:
    torch.manual_seed(0)
    net = small_cnn().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    if profile is not None:  # the optimizer's own methods, torch's wrappers around them included, are not the agent
        optimizer.step = profile.timed(NOT_AGENT, optimizer.step)  # type: ignore[method-assign]
        optimizer.zero_grad = profile.timed(NOT_AGENT, optimizer.zero_grad)  # type: ignore[method-assign]
    model = pa.AdaptiveDataParallel(net, optimizer, scaling_rule=pa.AdaScale(), device_ids=device_ids(device))
    loader = pa.AdaptiveDataLoader(setup.data, batch_size=setup.local_bsz * dist.get_world_size(), shuffle=True)
    if autoscale:
        bounds = (setup.local_bsz, setup.local_bsz)
        loader.autoscale_batch_size(loader.batch_size, bounds, adapt_interval_steps=args.adapt_interval)
    return Loop(loader, model, optimizer, device, profile)


def paired_run(
    setup: Setup, args: argparse.Namespace, device: torch.device, autoscale: bool, profile: Profile | None
) -> tuple[Timing, Timing]:
    """(plain DDP, agent) in one process side by side: each warmed up, then `args.steps` steps of each in blocks of
    `args.block`, alternating (which goes first alternates too), so both see the same moments of the host's load. The
    agent's background thread is not paused during plain blocks: what it runs there counts for plain DDP, so the
    agent's overhead is, if anything, understated by its background work (printed on its own with --profile)."""
    with tempfile.TemporaryDirectory() as tmp:
        agent = pa.init_process_group("gloo", report_path=Path(tmp) / "report.json")  # joins the existing group
        loops = (plain_loop(setup, device), agent_loop(setup, args, device, autoscale, profile))
        try:
            warmups = [timed(loop, warmup_steps(args))[0] for loop in loops]
            if profile is not None:
                profile.recording = True
            walls, cpus = [0.0, 0.0], [0.0, 0.0]
            for block in range(math.ceil(args.steps / args.block)):
                steps = min(args.block, args.steps - block * args.block)
                for which in (0, 1) if block % 2 == 0 else (1, 0):
                    wall, cpu = timed(loops[which], steps)
                    walls[which] += wall
                    cpus[which] += cpu
        finally:
            if profile is not None:
                profile.recording = False
            for loop in loops:
                loop.close()
            agent.close()
    cpu_sums = torch.tensor(cpus, dtype=torch.float64)
    dist.all_reduce(cpu_sums)
    plain, with_agent = (Timing(walls[i] / args.steps, float(cpu_sums[i]) / args.steps, warmups[i]) for i in (0, 1))
    return plain, with_agent


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
    examples = (warmup_steps(args) + args.steps + 1) * args.world_size
    setups = [Setup(ms, LOCAL_BSZ_BY_STEP_MS[ms], images(examples * LOCAL_BSZ_BY_STEP_MS[ms])) for ms in args.step]
    profiles = {(s.step_ms, name): Profile() for s in setups for name in AGENT_CONFIGS}
    # per agent configuration, one (plain DDP, agent) pair of timings per round
    pairs: dict[tuple[int, str], list[tuple[Timing, Timing]]] = {
        (s.step_ms, name): [] for s in setups for name in AGENT_CONFIGS
    }
    for round_index in range(args.rounds):
        order = AGENT_CONFIGS if round_index % 2 == 0 else AGENT_CONFIGS[::-1]
        for setup in setups:
            for name in order:
                autoscale = name == "agent, autoscaling"
                if not args.profile:
                    pairs[setup.step_ms, name].append(paired_run(setup, args, device, autoscale, None))
                    continue
                profile = profiles[setup.step_ms, name]
                with profile.installed():
                    pairs[setup.step_ms, name].append(paired_run(setup, args, device, autoscale, profile))
                profile.steps += args.steps
    if rank == 0:
        results.put((pairs, {key: (dict(p.wall_ns), dict(p.cpu_ns), p.steps) for key, p in profiles.items()}))
    dist.destroy_process_group()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def overhead_table(pairs: dict[tuple[int, str], list[tuple[Timing, Timing]]], args: argparse.Namespace) -> Table:
    table = Table(
        title=f"Agent overhead: small CNN, {args.world_size} processes (gloo, {args.device}, 1 thread each); "
        f"medians of {args.rounds} rounds × {args.steps} steps (blocks of {args.block}, plain DDP and the agent "
        f"alternating) after {warmup_steps(args)} of warm-up"
        + ("; PROFILED (wrappers inflate the agent's times)" if args.profile else "")
    )
    columns = (
        "step",
        "configuration",
        "wall ms / step",
        "overhead (wall) [quartiles]",
        "CPU ms / step",
        "overhead (CPU) [quartiles]",
        "start-up, ms",
    )
    for name in columns:
        table.add_column(name, justify="left" if name in ("step", "configuration") else "right")
    for ms in args.step:
        plain = [p for name in AGENT_CONFIGS for p, _ in pairs[ms, name]]
        table.add_row(
            f"{ms} ms ({LOCAL_BSZ_BY_STEP_MS[ms]} images)",
            "plain DDP",
            f"{1e3 * statistics.median(p.wall_s for p in plain):.2f}",
            "—",
            f"{1e3 * statistics.median(p.cpu_s for p in plain):.2f}",
            "—",
            "—",
        )
        for name in AGENT_CONFIGS:
            runs = pairs[ms, name]
            # overhead: median over rounds of the ratio to plain DDP run beside it (block by block, so load from
            # other processes, which drifts over seconds, falls on both alike)
            table.add_row(
                "",
                name,
                f"{1e3 * statistics.median(a.wall_s for _, a in runs):.2f}",
                overhead_cell([a.wall_s / p.wall_s for p, a in runs]),
                f"{1e3 * statistics.median(a.cpu_s for _, a in runs):.2f}",
                overhead_cell([a.cpu_s / p.cpu_s for p, a in runs]),
                f"{1e3 * statistics.median(a.warmup_wall_s - p.warmup_wall_s for p, a in runs):+.0f}",
            )
    return table


def overhead_cell(ratios: list[float]) -> str:
    """The median ratio to plain DDP as a percentage, with the quartiles over rounds."""
    median = statistics.median(ratios)
    if len(ratios) < 2:
        return f"{100 * (median - 1):+.1f}%"
    low, _, high = statistics.quantiles(ratios, n=4)
    return f"{100 * (median - 1):+.1f}% [{100 * (low - 1):+.1f}, {100 * (high - 1):+.1f}]"


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
    parser.add_argument("--steps", type=int, default=200, help="timed steps per configuration and round")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--block", type=int, default=10, help="steps of one side before the other takes over")
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
    pairs, profiles = results.get()
    console = Console(width=180)
    console.print(overhead_table(pairs, args))
    if args.profile:
        console.print(profile_table(profiles, args))


if __name__ == "__main__":
    main()

"""Progress bars of a simulation command: one per policy, each policy in a process of its own. Apart from the
command's module so that `pollux --help` does not load rich's progress machinery."""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
from concurrent.futures import ProcessPoolExecutor

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.text import Text

from pollux.sim.cli import SimInputs, run_policy
from pollux.sim.run import SimConfig, SimResult


def run_policies(
    policies: list[str], inputs: SimInputs, config: SimConfig, processes: int, console: Console
) -> list[SimResult]:
    """Run each policy in its own process (in this one with `processes` = 1) with a progress bar per policy."""
    with (
        multiprocessing.Manager() as manager,
        Progress(
            TextColumn("{task.description:>10}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("jobs done"),
            SimulatingSeconds(),
            console=console,
            transient=False,
        ) as bars,
    ):
        updates = manager.Queue()
        tasks = {name: bars.add_task(name, total=None, start=False) for name in policies}
        if processes == 1:
            inline, results = _BarUpdates(bars, tasks), []
            for name in policies:
                results.append(run_policy(name, inputs, config, inline))
                bars.stop_task(tasks[name])
            return results
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=max(1, processes), mp_context=context) as pool:
            futures = {name: pool.submit(run_policy, name, inputs, config, updates) for name in policies}
            running = dict(futures)
            while running:
                with contextlib.suppress(queue.Empty):
                    name, done, total = updates.get(timeout=0.2)
                    _advance(bars, tasks[name], done, total)
                for name in [name for name, future in running.items() if future.done()]:
                    bars.stop_task(tasks[name])  # its result is in: the clock stops where `wall_s` stopped
                    del running[name]
            results = [futures[name].result() for name in policies]
        for result in results:
            _advance(bars, tasks[result.policy], len(result.jobs), len(result.jobs))
    return results


class SimulatingSeconds(ProgressColumn):
    """Seconds a policy has been simulating, counted as the table's "wall s" counts them: from its simulation's
    start (not from when its bar appeared: a policy may wait for a free process) until its result is in (its last
    job's finish is not the end: each job's fairness is measured after)."""

    def render(self, task: Task) -> Text:
        if task.start_time is None:
            return Text("waiting", style="progress.elapsed")
        if task.stop_time is None:
            return Text(f"simulating {task.elapsed or 0.0:.1f} s", style="progress.elapsed")
        return Text(f"simulated in {task.elapsed or 0.0:.1f} s", style="progress.elapsed")


def _advance(bars: Progress, task: TaskID, done: int, total: int) -> None:
    """Move a policy's bar; its first update (its simulation starting) starts its clock."""
    bars.start_task(task)
    bars.update(task, completed=done, total=total)


class _BarUpdates:
    """`run_policy`'s progress queue when it runs in this process: each update moves its bar at once."""

    def __init__(self, bars: Progress, tasks: dict[str, TaskID]) -> None:
        self.bars, self.tasks = bars, tasks

    def put(self, update: tuple[str, int, int]) -> None:
        name, done, total = update
        _advance(self.bars, self.tasks[name], done, total)

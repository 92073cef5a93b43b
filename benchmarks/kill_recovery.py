"""Work lost to `kill -9`: of the scheduler while jobs of 1, 2 and 3 workers train, and of one worker; and what a
periodic checkpoint costs the examples.

Run: .venv/bin/python -m benchmarks.kill_recovery [--kills 10] [--worker-kills 3] [--interval 2] [--seed 0]

A real `pollux up` (local backend, 6 CPU slots, fifo: each job keeps its 1, 2 or 3 workers) runs three
`benchmarks/ledger_job.py` jobs. The scheduler is SIGKILLed at random moments and started again, `--kills` times;
then rank 1 of the 3-worker job is SIGKILLed `--worker-kills` times (a crash: the service retries it). Every job
must finish, and its ledger must show every example of every epoch trained exactly once.

Work lost by one incarnation of a job = the training time between the checkpoint its successor resumed from and the
last step it took (0 when the SIGTERM that PDEATHSIG sends on the scheduler's death saved at the last step); the
periodic checkpoint interval (`--interval`) bounds it when nothing could save (a killed worker). The tests in
tests/runtime/test_kill_recovery.py run the same scenario and assert those bounds.

Save cost: each example trains alone for a while with a checkpoint every second; the table gives the median save
and step times, and the interval the agent picks by itself (`pollux.agent.context.AUTO_CHECKPOINT_*`: at least 30 s,
and at least 100 saves' worth) with the share of time it then spends saving.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from pollux.agent.context import AUTO_CHECKPOINT_COST_FACTOR, AUTO_CHECKPOINT_MIN_S
from pollux.runtime.client import Client
from pollux.runtime.store import StateStore

REPO = Path(__file__).resolve().parents[1]
LEDGER_JOB = Path(__file__).with_name("ledger_job.py")
WORKERS = {"one": 1, "two": 2, "three": 3}
FINAL = ("completed", "failed", "cancelled")


@dataclass(frozen=True)
class Resume:
    """One restart of a job: what the previous incarnation had done, and what its successor resumed from."""

    job: str
    cause: str  # "scheduler" or "worker"
    killed_at_s: float
    lost_examples: int
    lost_s: float  # training time between the restored checkpoint and the previous incarnation's last step


@dataclass
class Outcome:
    kills: list[tuple[str, float]] = field(default_factory=list)  # (cause, time.time()) of every kill
    kills_while_starting: int = 0  # scheduler kills that found a job not training yet (its workers starting)
    resumes: list[Resume] = field(default_factory=list)
    finals: dict[str, dict] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def wait_for(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


class KillScenario:
    """The scheduler, its three ledger jobs, and the kills; everything lives under `root`."""

    def __init__(
        self, root: Path, interval_s: float, epochs: int, seed: int, step_s: float = 0.01, backoff_s: float = 1.0
    ) -> None:
        self.root, self.state = root, root / "state"
        self.interval_s, self.epochs, self.step_s, self.backoff_s = interval_s, epochs, step_s, backoff_s
        self.rng = np.random.default_rng(seed)
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.kills: list[tuple[str, float]] = []  # (cause, time.time()) of every kill
        self.kills_while_starting = 0
        self.ups = 0

    def out(self, job: str) -> Path:
        return self.root / "out" / job

    # -- the scheduler ----------------------------------------------------------------------------------------
    def up(self) -> None:
        """Start `pollux up` and wait until it serves."""
        self.ups += 1
        log = (self.root / f"up-{self.ups}.log").open("w")
        args = ["--slots", "6", "--policy", "fifo", "--interval", "2", "--backoff", str(self.backoff_s)]
        args += ["--max-attempts", "10"]
        args += ["--checkpoint-interval", str(self.interval_s), "--stop-grace", "30"]
        self.scheduler = subprocess.Popen(
            [sys.executable, "-m", "pollux", "up", "--state-dir", str(self.state), *args],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        scheduler = self.scheduler

        def serving() -> bool:
            if scheduler.poll() is not None:
                raise RuntimeError(f"pollux up exited {scheduler.returncode}: see {log.name}")
            try:
                return json.loads((self.state / "endpoint.json").read_text())["pid"] == scheduler.pid
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                return False

        wait_for(serving, 120, "pollux up to serve")

    def kill_scheduler(self) -> None:
        assert self.scheduler is not None
        self.kills.append(("scheduler", time.time()))
        self.scheduler.send_signal(signal.SIGKILL)
        self.scheduler.wait()

    def down(self) -> None:
        if self.scheduler is not None and self.scheduler.poll() is None:
            self.scheduler.send_signal(signal.SIGTERM)  # as `pollux down`: jobs checkpoint, the service exits
            try:
                self.scheduler.wait(120)
            except subprocess.TimeoutExpired:
                self.scheduler.kill()
                self.scheduler.wait()

    # -- jobs -------------------------------------------------------------------------------------------------
    def submit_all(self) -> None:
        client = Client(self.state)
        for job, workers in WORKERS.items():
            spec = self.root / f"{job}.toml"
            command = ["python", str(LEDGER_JOB), "--out", str(self.out(job)), "--epochs", str(self.epochs)]
            command += ["--step-s", str(self.step_s)]
            spec.write_text(
                f'name = "{job}"\ncommand = {json.dumps(command)}\ninit_batch_size = 24\nadaptive = false\n'
                f"gpus = {workers}\nmin_gpus = {workers}\nmax_gpus = {workers}\n"
            )
            client.submit(spec)

    def statuses(self) -> dict[str, str]:
        store = StateStore(self.state / "state.db")
        try:
            return {state.name: state.status for state in store.jobs()}
        finally:
            store.close()

    def starts(self, job: str) -> list[dict]:
        path = self.out(job) / "starts.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def training(self, job: str) -> bool:
        """The job's current incarnation, started after the last kill, has taken a step."""
        starts, progress = self.starts(job), self.out(job) / "progress"
        if not starts or not progress.exists() or (self.kills and starts[-1]["at_s"] < self.kills[-1][1]):
            return False
        fields = progress.read_text().split()
        return len(fields) == 3 and fields[2] == starts[-1]["incarnation"]

    def all_training(self) -> bool:
        return all(status in FINAL or self.training(job) for job, status in self.statuses().items())

    def rank1_pid(self, job: str) -> int | None:
        """The pid of rank 1 of the incarnation that trains now, if it is alive."""
        if not self.training(job):
            return None
        pid, incarnation = (self.out(job) / "pid-1").read_text().split()
        alive = Path(f"/proc/{pid}").exists() and incarnation == self.starts(job)[-1]["incarnation"]
        return int(pid) if alive else None

    # -- the experiment ---------------------------------------------------------------------------------------
    def kill_scheduler_at_random(self, kills: int, during_relaunch: float, progress: Callable[[str], None]) -> None:
        """`kills` times: SIGKILL the scheduler at a random moment, 0.5-4 s after the jobs train again or, with
        probability `during_relaunch`, after it started serving (workers starting, or the previous ones saving),
        and start it again."""
        for k in range(kills):
            if self.rng.uniform() >= during_relaunch:
                wait_for(self.all_training, 300, "the jobs to train again")
            time.sleep(float(self.rng.uniform(0.5, 4.0)))
            if all(status in FINAL for status in self.statuses().values()):
                break
            if not self.all_training():
                self.kills_while_starting += 1
            self.kill_scheduler()
            progress(f"scheduler kill {k + 1}/{kills}")
            self.up()

    def kill_worker(self, kills: int, progress: Callable[[str], None], job: str = "three") -> None:
        """`kills` times: 4-6 s after the job trains (longer than a checkpoint interval of the tests), SIGKILL its
        rank 1 (it saves nothing), and wait for the retry."""
        for k in range(kills):
            wait_for(lambda: self.rank1_pid(job) or self.statuses()[job] in FINAL, 180, f"{job} to train")
            if self.statuses()[job] in FINAL:
                break
            time.sleep(float(self.rng.uniform(4.0, 6.0)))
            before, pid = len(self.starts(job)), self.rank1_pid(job)
            if pid is None:
                continue  # it finished or crashed meanwhile
            self.kills.append(("worker", time.time()))
            os.kill(pid, signal.SIGKILL)
            progress(f"worker kill {k + 1}/{kills}")
            wait_for(lambda n=before: len(self.starts(job)) > n or self.statuses()[job] in FINAL, 180, "a restart")

    def finish(self, timeout_s: float = 900) -> None:
        wait_for(lambda: all(s in FINAL for s in self.statuses().values()), timeout_s, "every job to finish")

    def resumes(self) -> list[Resume]:
        """Every restart of every job, with the work it lost and the kill that caused it."""
        out = []
        for job in WORKERS:
            for start in self.starts(job)[1:]:
                cause = max((k for k in self.kills if k[1] <= start["at_s"]), key=lambda k: k[1], default=None)
                saved_at = start["checkpoint_saved_at_s"] or 0.0
                out.append(
                    Resume(
                        job=job,
                        cause=cause[0] if cause else "none",
                        killed_at_s=cause[1] if cause else 0.0,
                        lost_examples=start["previous_examples"] - start["examples"],
                        lost_s=max(start["previous_step_at_s"] - saved_at, 0.0),
                    )
                )
        return out

    def finals(self) -> dict[str, dict]:
        return {job: json.loads(path.read_text()) for job in WORKERS if (path := self.out(job) / "final.json").exists()}


def run_scenario(
    root: Path,
    kills: int = 10,
    worker_kills: int = 3,
    interval_s: float = 2.0,
    epochs: int = 300,
    seed: int = 0,
    during_relaunch: float = 0.25,
    progress: Callable[[str], None] = lambda _: None,
    step_s: float = 0.01,
    backoff_s: float = 1.0,
) -> Outcome:
    """The whole experiment under `root`; returns what every restart lost and how every job ended. `step_s` is how
    long a ledger job's step sleeps (its pace: the kills come at moments in seconds, so the training done in between
    grows as 1/`step_s`), `backoff_s` the service's wait before retrying a crashed job (doubling)."""
    started = time.monotonic()
    scenario = KillScenario(root, interval_s, epochs, seed, step_s, backoff_s)
    scenario.up()
    try:
        scenario.submit_all()
        wait_for(scenario.all_training, 300, "every job to train")
        scenario.kill_scheduler_at_random(kills, during_relaunch, progress)
        scenario.kill_worker(worker_kills, progress)
        scenario.finish()
    finally:
        scenario.down()
    return Outcome(
        kills=scenario.kills,
        kills_while_starting=scenario.kills_while_starting,
        resumes=scenario.resumes(),
        finals=scenario.finals(),
        statuses=scenario.statuses(),
        seconds=time.monotonic() - started,
    )


EXAMPLES = {
    "digits_mlp": [str(REPO / "examples" / "digits_mlp.py"), "--epochs", "300"],
    "cifar_like_cnn": [str(REPO / "examples" / "cifar_like_cnn.py"), "--epochs", "2", "--examples", "2000"],
    "ledger_job": [str(LEDGER_JOB), "--epochs", "100", "--step-s", "0"],
}
SAVE = re.compile(r"checkpoint took ([0-9.]+) s")


def save_costs(root: Path, interval_s: float = 1.0) -> dict[str, tuple[float, float]]:
    """(median seconds per save, median seconds per optimizer step) of each example, trained alone by one process
    with a checkpoint every `interval_s`."""
    costs = {}
    for name, command in EXAMPLES.items():
        folder = root / name
        env = {
            **os.environ,
            "POLLUX_CHECKPOINT_DIR": str(folder / "ckpt"),
            "POLLUX_REPORT_PATH": str(folder / "report.json"),
            "POLLUX_CHECKPOINT_INTERVAL_S": str(interval_s),
            "OMP_NUM_THREADS": "1",
        }
        if name == "ledger_job":
            command = [*command, "--out", str(folder / "out")]
        started = time.monotonic()
        run = subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, cwd=REPO)
        elapsed = time.monotonic() - started
        if run.returncode != 0:
            raise RuntimeError(f"{name} exited {run.returncode}:\n{run.stderr[-2000:]}")
        saves = [float(x) for x in SAVE.findall(run.stderr + run.stdout)]
        steps = json.loads((folder / "report.json").read_text())["progress"]["steps"]
        costs[name] = (statistics.median(saves) if saves else float("nan"), elapsed / max(steps, 1))
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--worker-kills", type=int, default=3)
    parser.add_argument("--interval", type=float, default=2.0, help="periodic checkpoint interval, seconds")
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory(prefix="pollux-kills-") as tmp:
        outcome = run_scenario(
            Path(tmp), args.kills, args.worker_kills, args.interval, args.epochs, args.seed, console.log
        )
    table = Table(title=f"work lost per restart (checkpoint interval {args.interval:g} s; {os.uname().nodename})")
    for column in ("cause", "restarts", "lost s: median", "max", "lost examples: median", "max"):
        table.add_column(column, justify="right")
    for cause in ("scheduler", "worker"):
        rows = [r for r in outcome.resumes if r.cause == cause]
        if rows:
            lost_s, lost_ex = [r.lost_s for r in rows], [r.lost_examples for r in rows]
            table.add_row(
                cause,
                str(len(rows)),
                f"{statistics.median(lost_s):.2f}",
                f"{max(lost_s):.2f}",
                f"{statistics.median(lost_ex):.0f}",
                f"{max(lost_ex)}",
            )
    console.print(table)
    starting = outcome.kills_while_starting
    console.print(f"{starting} of the scheduler kills came while a job was (re)starting", highlight=False)
    for job, final in outcome.finals.items():
        console.print(
            f"{job}: {outcome.statuses.get(job)}, {final['restarts']} restarts, ledger counts in "
            f"[{final['ledger_min']}, {final['ledger_max']}] (1 = every example of every epoch exactly once)",
            highlight=False,
        )
    console.print(f"{outcome.seconds:.0f} s in all", highlight=False)

    with tempfile.TemporaryDirectory(prefix="pollux-saves-") as tmp:
        costs = save_costs(Path(tmp))
    table = Table(title="what a periodic checkpoint costs (one process, a save every second)")
    for column in ("example", "save ms", "wall ms / step", "auto interval s", "time saving"):
        table.add_column(column, justify="right")
    for name, (save_s, step_s) in costs.items():
        auto_s = max(AUTO_CHECKPOINT_MIN_S, AUTO_CHECKPOINT_COST_FACTOR * save_s)
        table.add_row(name, f"{save_s * 1e3:.1f}", f"{step_s * 1e3:.1f}", f"{auto_s:.0f}", f"{save_s / auto_s:.3%}")
    console.print(table)


if __name__ == "__main__":
    main()

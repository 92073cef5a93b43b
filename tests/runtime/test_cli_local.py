"""End to end on the local backend: `pollux up` as its own process, driven by the CLI; kill -9 and restart it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_jobs import pid_alive, wait_for, write_spec

from pollux.agent.report import read_report
from pollux.runtime.store import StateStore

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits_mlp.py"


def pollux(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "pollux", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    if check and result.returncode != 0:
        raise AssertionError(f"pollux {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


class Up:
    """`pollux up` in a child process, with its own state dir."""

    def __init__(self, state: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.state = state
        self.log = (state.parent / f"up-{len(list(state.parent.glob('up-*')))}.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pollux", "up", "--state-dir", str(state), *args],
            cwd=REPO,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        wait_for(lambda: self.serving() or self.process.poll() is not None, 60, "pollux up")
        assert self.process.poll() is None, Path(self.log.name).read_text()

    def serving(self) -> bool:
        """This process wrote the endpoint (a killed predecessor's stale file does not count)."""
        try:
            return json.loads((self.state / "endpoint.json").read_text())["pid"] == self.process.pid
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return False

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return pollux(*args, "--state-dir", str(self.state), check=check)

    def down(self) -> None:
        if self.process.poll() is None:
            self.cli("down")
            assert self.process.wait(60) == 0, Path(self.log.name).read_text()
        self.log.close()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


@pytest.fixture()
def state(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "state"


def store_of(state: Path) -> StateStore:
    return StateStore(state / "state.db")


def test_three_example_jobs_grow_shrink_and_complete_under_pollux(tmp_path, state):
    """Real example jobs resized by checkpoint-restart. Whether a digits job gains from a second CPU slot depends on
    how loaded the machine is, so the resize the test demands is one the policy guarantees: a job that has never
    reported (modelled as scaling linearly) holds all 4 slots, and three arriving jobs make it shrink (a waiting job
    costs ~1/ε in the power mean, so each gets a slot); when they finish, it grows back."""
    pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
    pytest.importorskip("sklearn", reason="the examples need it: make test installs it (pip install -e '.[examples]')")
    from runtime_jobs import COUNTER_JOB

    (tmp_path / "counter.py").write_text(COUNTER_JOB)
    hog = write_spec(tmp_path, "hog", "--steps 100000 --step-s 0.05", local_bsz_bounds=[8, 32], max_gpus=4)
    hog.write_text(hog.read_text().replace("python counter.py", f"python {tmp_path / 'counter.py'}"))
    specs = []
    for name in ("digits-a", "digits-b", "digits-c"):
        path = tmp_path / f"{name}.toml"
        path.write_text(
            f'name = "{name}"\ncommand = ["python", "{DIGITS}", "--epochs", "40"]\ninit_batch_size = 32\n'
            "max_batch_size = 512\nlocal_bsz_bounds = [8, 128]\nmax_gpus = 4\n"
        )
        specs.append(path)
    up = Up(state, "--slots", "4", "--interval", "2", "--restart-delay", "1", "--lease", "0")
    try:
        store = store_of(state)
        assert "submitted" in up.cli("submit", str(hog)).stdout
        wait_for(lambda: (store.job("hog").status, sum(store.job("hog").allocation)) == ("running", 4), 60, "hog on 4")
        for path in specs:
            assert "submitted" in up.cli("submit", str(path)).stdout
        digits = ("digits-a", "digits-b", "digits-c")
        wait_for(lambda: all(store.job(n).status == "completed" for n in digits), 300, "the three jobs to complete")
        wait_for(lambda: sum(store.job("hog").allocation) == 4, 60, "hog to grow back to 4 slots")
        listing = up.cli("ls").stdout
        assert all(name in listing for name in digits)
        for name in digits:
            report = read_report(state / "jobs" / name / "report.json")
            assert report.status == "finished" and report.progress.epoch == 40
        # GPUs held at each start (a move stops the job first: 0 in between): 4, fewer while the others ran, 4 again
        sizes = [gpus for e in store.events("hog") if e["kind"] == "allocation" and (gpus := sum(e["allocation"]))]
        assert sizes[0] == 4 and min(sizes) < 4 and sizes[-1] == 4, sizes
        history = up.cli("ls", "hog").stdout
        assert "checkpointed to move to" in history
        assert up.cli("cancel", "hog").returncode == 0
        store.close()
    finally:
        up.down()


def check_resumed_once_without_duplicates(
    state: Path, store: StateStore, names: tuple[str, ...], steps: int, resumed: bool = True
) -> None:
    for name in names:
        folder = state / "jobs" / name / "checkpoints"
        assert not (folder / "DUPLICATE").exists(), f"{name} had two live worker groups"
        assert int((folder / "step").read_text()) == steps
        if not resumed:
            continue
        starts = [int(line.split("step=")[1]) for line in (folder / "starts.txt").read_text().splitlines()]
        assert len(starts) >= 2 and starts[0] == 0 and starts[-1] > 0, starts
        reasons = [reason for _, status, reason in store.history(name) if status == "pending"]
        assert any("scheduler restarted" in reason for reason in reasons)
    assert not store.workers()


def test_a_scheduler_killed_with_sigkill_loses_no_job_and_duplicates_no_worker(tmp_path, state, counter_job):
    names = ("left", "right")
    specs = [write_spec(counter_job.parent, name, "--steps 200 --step-s 0.04", gpus=2) for name in names]
    up = Up(state, "--slots", "4", "--policy", "fifo", "--interval", "1")
    store = store_of(state)
    second = None
    try:
        for spec in specs:
            up.cli("submit", str(spec))
        wait_for(lambda: all(job.status == "running" for job in store.jobs()), 60, "both jobs to run")
        steps = [state / "jobs" / name / "checkpoints" / "step" for name in names]
        wait_for(lambda: all(path.exists() for path in steps), 30, "first steps")
        old_pids = [(worker.pid, worker.start_ticks) for _, worker in store.workers()]
        assert len(old_pids) == 4
        up.kill()
        # restart at once: the old workers (SIGTERM from the kernel, PDEATHSIG) may still be checkpointing
        second = Up(state, "--slots", "4", "--policy", "fifo", "--interval", "1")
        wait_for(lambda: all(job.status == "completed" for job in store.jobs()), 120, "both jobs to complete")
        assert not any(pid_alive(pid, ticks) for pid, ticks in old_pids)
        check_resumed_once_without_duplicates(state, store, names, 200)
    finally:
        store.close()
        up.kill() if up.process.poll() is None else None
        if second is not None:
            second.down()


@pytest.mark.parametrize("point", ["after-launch", "after-stop"])
def test_a_scheduler_killed_between_two_writes_loses_and_duplicates_nothing(tmp_path, state, counter_job, point):
    """`after-launch`: the first job's workers started but not yet recorded. `after-stop` (mid-round): the second
    job's arrival makes pollux shrink the first from 2 GPUs to 1; its old group has checkpointed and exited, but
    neither the exit nor the new group is recorded."""
    names = ("first", "second")
    specs = [write_spec(counter_job.parent, name, "--steps 150 --step-s 0.04", gpus=1) for name in names]
    policy = ("--policy", "pollux", "--restart-delay", "0", "--lease", "0")  # resized at once: no lease
    up = Up(state, "--slots", "2", "--interval", "1", *policy, env={"POLLUX_TEST_CRASH_AT": point})
    store = store_of(state)
    second = None
    try:
        up.cli("submit", str(specs[0]))
        if point == "after-stop":
            wait_for(lambda: store.job("first").allocation == (2,), 60, "the first job on both slots")
            up.cli("submit", str(specs[1]))
        assert up.process.wait(60) == -signal.SIGKILL  # it died at the crash point
        second = Up(state, "--slots", "2", "--interval", "1", "--policy", "fifo")
        if point == "after-launch":
            second.cli("submit", str(specs[1]))
        wait_for(lambda: all(job.status == "completed" for job in store.jobs()), 120, "the jobs to complete")
        # after-launch: the unrecorded group may have died before its first step; after-stop: it had run
        check_resumed_once_without_duplicates(state, store, names, 150, resumed=False)
        if point == "after-stop":
            starts = (state / "jobs" / "first" / "checkpoints" / "starts.txt").read_text().splitlines()
            assert len(starts) >= 2 and int(starts[-1].split("step=")[1]) > 0, starts
    finally:
        store.close()
        if second is not None:
            second.down()


def test_up_refuses_a_second_service_and_a_public_bind(tmp_path, state):
    public = pollux("up", "--state-dir", str(state), "--listen", "0.0.0.0:0", check=False)
    assert public.returncode == 2 and "--tls-cert" in public.stderr
    up = Up(state, "--slots", "2")
    try:
        again = pollux("up", "--state-dir", str(state), "--slots", "2", check=False, timeout=60)
        assert again.returncode == 2 and "already runs" in again.stderr
        assert up.process.poll() is None
        assert "job" in up.cli("ls").stdout
        nothing = pollux("ls", "--state-dir", str(tmp_path / "elsewhere"), check=False)
        assert nothing.returncode == 2 and "pollux up" in nothing.stderr
    finally:
        up.down()
    assert os.path.exists(state / "state.db") and not (state / "endpoint.json").exists()


def test_up_on_a_taken_port_is_one_line_naming_it_and_leaves_nothing_running(state):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        listen = f"127.0.0.1:{port}"
        result = pollux("up", "--state-dir", str(state), "--slots", "1", "--listen", listen, check=False, timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on {listen}" in lines[0] and "--listen" in lines[0], result.stderr
    assert not (state / "endpoint.json").exists()

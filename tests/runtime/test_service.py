"""The scheduler service in-process, on the local launcher with real worker processes (the counter job)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_jobs import pid_alive, wait_for, write_spec

from pollux.errors import SpecError, UnknownJobError
from pollux.runtime import joblog
from pollux.runtime.local import LocalLauncher
from pollux.runtime.service import Service, ServiceConfig
from pollux.runtime.spec import load_spec
from pollux.runtime.store import StateStore

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them


class Running:
    """A service running on a thread, stopped gracefully at the end of the test."""

    def __init__(
        self,
        tmp_path: Path,
        slots: int = 4,
        policy: str = "fifo",
        launcher: LocalLauncher | None = None,
        **options: float,
    ) -> None:
        settings = {"interval_s": 0.5, "tick_s": 0.05, "backoff_s": 0.3, "stop_grace_s": 10.0, **options}
        self.config = ServiceConfig(state_dir=tmp_path / "state", policy=policy, **settings)  # type: ignore[arg-type]
        self.service = Service(self.config, launcher or LocalLauncher(slots, stop_grace_s=5.0))
        self.thread = threading.Thread(target=self.service.run, daemon=True)
        self.thread.start()

    def status(self, name: str) -> str:
        return self.service.store.job(name).status

    def wait_status(self, name: str, *statuses: str, timeout: float = 60.0) -> str:
        return str(wait_for(lambda: self.status(name) in statuses and self.status(name), timeout, f"{name} {statuses}"))

    def stop(self) -> None:
        self.service.request_shutdown()
        assert self.service.wait_stopped(60), "the service did not stop"
        self.thread.join(10)
        self.service.launcher.shutdown()


@pytest.fixture()
def running(tmp_path: Path) -> Iterator[Running]:
    service = Running(tmp_path)
    yield service
    service.stop()


def starts(service: Running, name: str) -> list[str]:
    path = service.config.job_dir(name) / "checkpoints" / "starts.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_a_job_runs_to_completion_with_its_history(running, counter_job):
    running.service.submit(load_spec(write_spec(counter_job.parent, "short", "--steps 10", gpus=2)))
    running.wait_status("short", "completed")
    state = running.service.store.job("short")
    assert [status for _, status, _ in running.service.store.history("short")] == ["pending", "running", "completed"]
    assert state.allocation == () and not running.service.store.workers("short")
    log = joblog.read_merged(running.config.log_dir("short"))[0]
    assert "[rank 0] start world=2 step=0" in log and "[rank 1] done" in log


def test_a_crashing_job_is_retried_from_its_checkpoint_then_fails_with_its_log(running, counter_job):
    running.service.submit(load_spec(write_spec(counter_job.parent, "flaky", "--steps 100 --crash-after 5")))
    running.wait_status("flaky", "failed", timeout=90)
    state = running.service.store.job("flaky")
    assert state.attempts == running.config.max_attempts
    assert "exit 3" in (state.last_error or "") and "crashing on purpose" in (state.last_error or "")
    # it resumed where it stopped: the first start at step 0, the retries later, never from scratch
    steps = [int(line.split("step=")[1]) for line in starts(running, "flaky")]
    assert steps[0] == 0 and len(steps) == running.config.max_attempts
    assert steps == sorted(steps) and steps[-1] >= 5 * (len(steps) - 1)
    reasons = [reason for _, status, reason in running.service.store.history("flaky") if status == "pending"]
    assert any("retry 1/" in reason for reason in reasons)


def test_a_killed_worker_makes_the_job_resume_from_its_checkpoint(running, counter_job):
    running.service.submit(load_spec(write_spec(counter_job.parent, "victim", "--steps 80", gpus=2)))
    running.wait_status("victim", "running")
    wait_for(lambda: (running.config.job_dir("victim") / "checkpoints" / "step").exists(), what="first steps")
    _, worker = running.service.store.workers("victim")[1]
    os.kill(worker.pid, signal.SIGKILL)
    running.wait_status("victim", "completed", timeout=90)
    steps = [int(line.split("step=")[1]) for line in starts(running, "victim")]
    assert len(steps) == 2 and steps[1] > 0, steps  # restarted once, not from scratch
    assert any("exit 137" in reason for _, _, reason in running.service.store.history("victim"))
    assert running.service.store.job("victim").last_error is None  # completed: the crash is history, not a note


def test_cancel_stops_the_workers_and_a_missing_program_fails_alone(running, counter_job):
    running.service.submit(load_spec(write_spec(counter_job.parent, "long", "--steps 100000", gpus=2)))
    spec = write_spec(counter_job.parent, "broken", gpus=1)
    spec.write_text(spec.read_text().replace('"python counter.py "', '"no-such-program --x"'))
    running.service.submit(load_spec(spec))
    running.wait_status("long", "running")
    pids = [(w.pid, w.start_ticks) for _, w in running.service.store.workers("long")]
    running.wait_status("broken", "failed")
    assert "no-such-program" in (running.service.store.job("broken").last_error or "")
    running.service.cancel("long")
    running.wait_status("long", "cancelled")
    assert not any(pid_alive(pid, ticks) for pid, ticks in pids)
    with pytest.raises(UnknownJobError, match="pollux ls"):
        running.service.cancel("nobody")


def test_jobs_wait_for_free_slots_and_impossible_requests_are_refused(running, counter_job):
    with pytest.raises(SpecError, match="min_gpus"):
        running.service.submit(load_spec(write_spec(counter_job.parent, "huge", min_gpus=8, max_gpus=8, gpus=8)))
    for name in ("a", "b"):
        running.service.submit(load_spec(write_spec(counter_job.parent, name, "--steps 30", gpus=3)))
    running.wait_status("a", "running")
    assert running.status("b") == "pending"  # 3 + 3 > 4 slots: FIFO keeps the second waiting
    running.wait_status("b", "completed", timeout=90)
    first_done = running.service.store.history("a")[-1][0]
    second_start = next(at for at, status, _ in running.service.store.history("b") if status == "running")
    assert second_start >= first_done


def test_shutdown_checkpoints_running_jobs_and_a_new_service_resumes_them(tmp_path, counter_job):
    first = Running(tmp_path)
    first.service.submit(load_spec(write_spec(counter_job.parent, "survivor", "--steps 60", gpus=2)))
    first.wait_status("survivor", "running")
    wait_for(lambda: (first.config.job_dir("survivor") / "checkpoints" / "step").exists(), what="first steps")
    first.stop()
    second = Running(tmp_path)
    try:
        second.wait_status("survivor", "completed", timeout=90)
        history = [(status, reason) for _, status, reason in second.service.store.history("survivor")]
        assert ("pending", "scheduler shut down; resumes at the next `pollux up`") in history
        steps = [int(line.split("step=")[1]) for line in starts(second, "survivor")]
        assert len(steps) == 2 and steps[1] > 0
    finally:
        second.stop()


def test_retries_come_after_the_back_off_not_at_the_next_periodic_round(tmp_path, counter_job):
    service = Running(tmp_path, interval_s=3600.0, backoff_s=0.3)
    try:
        service.service.submit(load_spec(write_spec(counter_job.parent, "flaky", "--steps 100 --crash-after 3")))
        service.wait_status("flaky", "failed", timeout=60)  # three launches an hour apart without the wake-up
        assert service.service.store.job("flaky").attempts == service.config.max_attempts
    finally:
        service.stop()


def test_a_cancel_followed_at_once_by_a_shutdown_is_not_lost(tmp_path, counter_job):
    service = Running(tmp_path)
    service.service.submit(load_spec(write_spec(counter_job.parent, "doomed", "--steps 100000", gpus=1)))
    service.wait_status("doomed", "running")
    service.service.cancel("doomed")
    service.stop()
    assert StateStore(service.config.database).job("doomed").status == "cancelled"


@pytest.mark.parametrize("policy", ["pollux", "tiresias", "tiresias-gittins", "optimus", "astraea"])
def test_every_runtime_policy_runs_jobs_to_completion(tmp_path, counter_job, policy):
    service = Running(tmp_path, policy=policy)
    try:
        for name in ("one", "two"):
            service.service.submit(load_spec(write_spec(counter_job.parent, name, "--steps 10", gpus=2)))
        for name in ("one", "two"):
            service.wait_status(name, "completed")
    finally:
        service.stop()


def test_a_policy_that_picks_batch_sizes_is_refused_with_the_alternatives(tmp_path):
    with pytest.raises(SpecError, match="use pollux, fifo"):
        Service(ServiceConfig(state_dir=tmp_path, policy="elastic-dp"), LocalLauncher(2))
    with pytest.raises(SpecError, match="fifo"):
        Service(ServiceConfig(state_dir=tmp_path, policy="lottery"), LocalLauncher(2))

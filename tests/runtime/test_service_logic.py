"""The service's decisions on a launcher without processes and a clock the test moves: every exit code, back-off,
cancel, launch failure and shutdown ends in the status the runtime promises, in milliseconds.

The same paths with real processes are tested in test_service.py, test_service_rounds.py and test_cli_local.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_launcher import FakeLauncher
from runtime_jobs import Clock, write_spec

from pollux.runtime.launcher import EXIT_NODE_LOST
from pollux.runtime.service import Service, ServiceConfig
from pollux.runtime.spec import load_spec


@pytest.fixture()
def rig(tmp_path: Path, counter_job: Path) -> Iterator[tuple[Service, FakeLauncher, Clock, Path]]:
    launcher, clock = FakeLauncher(), Clock()
    config = ServiceConfig(state_dir=tmp_path / "state", policy="fifo", interval_s=60.0, backoff_s=10.0, max_attempts=3)
    service = Service(config, launcher, clock=clock)
    service.recover()
    yield service, launcher, clock, counter_job.parent
    service.store.close()


def submit(service: Service, folder: Path, name: str, gpus: int = 1) -> None:
    service.submit(load_spec(write_spec(folder, name, gpus=gpus)))


def history(service: Service, name: str) -> list[str]:
    return [status for _, status, _ in service.store.history(name)]


def test_a_job_is_launched_in_the_pass_after_it_arrives_and_completes_on_exit_0(rig) -> None:
    service, launcher, _, folder = rig
    submit(service, folder, "a", gpus=2)
    service.step()
    assert launcher.running("a") and sum(launcher.groups["a"].request.allocation) == 2
    launcher.exit("a", 0)
    service.step()
    assert history(service, "a") == ["pending", "running", "completed"]
    assert service.store.job("a").allocation == () and service.store.workers("a") == []


def test_a_crash_waits_its_back_off_on_the_service_clock_then_fails_after_the_last_attempt(rig) -> None:
    service, launcher, clock, folder = rig
    submit(service, folder, "a")
    service.step()
    for attempt, backoff in ((1, 10.0), (2, 20.0)):
        launcher.exit("a", 3)
        service.step()
        state = service.store.job("a")
        assert (state.status, state.attempts) == ("pending", attempt)
        assert f"retry {attempt}/2 from the start in {backoff:.0f} s" in service.store.history("a")[-1][2]
        clock.now += backoff - 1.0
        service.step()
        assert not launcher.running("a")  # not a second early
        clock.now += 1.0
        service.step()
        assert launcher.running("a")
    launcher.exit("a", 3)
    service.step()
    state = service.store.job("a")
    assert state.status == "failed" and state.last_error is not None and state.last_error.startswith("exit 3")
    assert len(launcher.launches) == 3


def test_a_lost_node_is_no_crash_the_job_resumes_at_once_without_back_off(rig) -> None:
    service, launcher, _, folder = rig
    submit(service, folder, "a")
    service.step()
    for restart in (1, 2, 3):  # more losses than crash attempts allowed: the cluster's failures, not the job's
        launcher.exit("a", EXIT_NODE_LOST)
        service.step()  # settles the group and relaunches it in the same pass, on the service's unmoved clock
        state = service.store.job("a")
        assert launcher.running("a") and (state.status, state.attempts, state.restarts) == ("running", 0, restart)
        assert service.store.history("a")[-2][1:] == (
            "pending",
            "its node was lost; resumes from its last checkpoint on nodes that are alive",
        )


def test_a_cancel_stops_a_running_job_and_frees_its_gpus_for_a_waiting_one(rig) -> None:
    service, launcher, _, folder = rig
    submit(service, folder, "a", gpus=4)
    service.step()
    submit(service, folder, "b", gpus=4)
    service.step()
    assert launcher.running("a") and not launcher.running("b")
    service.cancel("a")
    service.step()
    assert service.store.job("a").status == "cancelled"
    assert launcher.running("b")  # in the same pass as the cancel


def test_a_cancelled_job_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path, counter_job) -> None:
    launcher, clock = FakeLauncher(), Clock()
    config = ServiceConfig(state_dir=tmp_path / "quick", policy="fifo", stop_grace_s=0.0)
    service = Service(config, launcher, clock=clock)
    submit(service, counter_job.parent, "a")
    service.step()
    launcher.ignores_stop.add("a")
    service.cancel("a")
    service.step()  # SIGTERM, no exit within the (zero) grace period, SIGKILL
    assert launcher.groups == {} and service.store.job("a").status == "cancelled"
    service.store.close()


def test_launch_failures_back_off_when_transient_and_fail_the_job_when_permanent(rig) -> None:
    service, launcher, clock, folder = rig
    submit(service, folder, "later")
    submit(service, folder, "never")
    launcher.refusals.update({"later": True, "never": False})
    service.step()
    assert [service.store.job(n).status for n in ("later", "never")] == ["pending", "failed"]
    assert "could not launch yet" in service.store.history("later")[-1][2]
    clock.now += service.config.backoff_s
    service.step()
    assert launcher.running("later")


def test_a_scheduler_restart_reaps_the_recorded_workers_and_relaunches_the_running_jobs(rig) -> None:
    service, launcher, clock, folder = rig
    submit(service, folder, "a", gpus=2)
    service.step()
    workers = launcher.groups["a"].workers
    restarted = Service(service.config, launcher, clock=clock)  # the first one was killed: nothing stopped
    restarted.recover()
    assert launcher.reaped == workers and launcher.poll("a") == 143  # they got SIGTERM and checkpointed
    launcher.forget("a")
    assert restarted.store.job("a").status == "pending" and "scheduler restarted" in restarted.store.history("a")[-1][2]
    restarted.step()
    assert launcher.running("a") and restarted.store.job("a").restarts == 1
    restarted.store.close()

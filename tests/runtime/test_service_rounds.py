"""When the service's rounds come and what they are given: arrivals, cancels, back-offs and stops handled in the
next loop pass, the policy fed each job's real age and re-allocations, and what the service says and logs.

The service runs on this thread (`Service.step`, one loop pass at a time) with an injected clock, on the local
launcher with real worker processes; nothing here waits on the wall clock except for processes to start or exit.
"""

from __future__ import annotations

import logging
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from runtime_jobs import Clock, write_spec

from pollux.engine import Decision, DecisionKind
from pollux.runtime.local import LocalLauncher
from pollux.runtime.service import Service, ServiceConfig
from pollux.runtime.spec import load_spec

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

# A job that runs until it is stopped, in one of a few ways (argv[1]); rank 0 counts its runs in `runs`:
#   plain            SIGTERM: checkpoint and exit 143, as the agent does (`ready-<rank>`: it handles SIGTERM now)
#   finish-on-term   SIGTERM: exit 0, as a job that finishes its last step while being stopped
#   wait-for-marker  SIGTERM: exit 143 only once the file argv[2] exists (else SIGKILL takes it); leaves `clean`
#   crash-first      its first run crashes at once (exit 3); later runs are plain
IDLE_JOB = textwrap.dedent(
    """
    import os, pathlib, signal, sys, time
    mode = sys.argv[1]
    ckpt = pathlib.Path(os.environ["POLLUX_CHECKPOINT_DIR"])
    ckpt.mkdir(parents=True, exist_ok=True)
    runs = ckpt / "runs"
    done = int(runs.read_text()) if runs.exists() else 0

    def on_term(signum, frame):
        if mode == "finish-on-term":
            sys.exit(0)
        if mode == "wait-for-marker":
            for _ in range(600):
                if pathlib.Path(sys.argv[2]).exists():
                    (ckpt / "clean").write_text("ok")
                    sys.exit(143)
                time.sleep(0.05)
        sys.exit(143)

    signal.signal(signal.SIGTERM, on_term)
    rank = os.environ.get("RANK", "0")
    (ckpt / f"ready-{rank}").write_text("")  # its SIGTERM handler is in place
    if rank == "0":
        tmp = ckpt / "runs.tmp"
        tmp.write_text(str(done + 1))
        tmp.replace(runs)
    if mode == "crash-first" and done == 0:
        sys.exit(3)
    while True:
        time.sleep(0.05)
    """
)


@pytest.fixture()
def jobs_dir(tmp_path: Path, counter_job: Path) -> Path:
    (counter_job.parent / "idle.py").write_text(IDLE_JOB)
    return counter_job.parent


@pytest.fixture()
def make(tmp_path: Path) -> Iterator[Callable[..., tuple[Service, Clock]]]:
    """A service on an injected clock, stepped by the test; every one made is shut down at the end."""
    made: list[Service] = []

    def make_service(policy: str = "pollux", slots: int = 4, **options: float | None) -> tuple[Service, Clock]:
        settings = {"interval_s": 3600.0, "backoff_s": 5.0, "stop_grace_s": 10.0, **options}
        config = ServiceConfig(state_dir=tmp_path / f"state-{len(made)}", policy=policy, **settings)  # type: ignore[arg-type]
        clock = Clock()
        service = Service(config, LocalLauncher(slots, stop_grace_s=5.0), clock=clock)
        service.recover()
        made.append(service)
        return service, clock

    yield make_service
    for service in made:
        service.request_shutdown()
        service.run()  # stops what still runs, closes the store
        service.launcher.shutdown()


def pump(service: Service, condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    """Run loop passes until `condition()` holds (processes need real time to start and exit)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        service.step()
        time.sleep(0.02)


def watch_until(service: Service, clock: Clock, condition: Callable[[], object], what: str) -> None:
    """Settle exited groups without running rounds, until `condition()` holds."""
    deadline = time.monotonic() + 60.0
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        service.lifecycle.watch(service.store.jobs(include_finished=False), clock())
        time.sleep(0.02)


def passes(service: Service, count: int = 10) -> None:
    for _ in range(count):
        service.step()
        time.sleep(0.02)


def submit(service: Service, folder: Path, name: str, args: str = "", script: str = "idle.py", **fields: object):
    path = write_spec(folder, name, args, **fields)
    path.write_text(path.read_text().replace("python counter.py", f"python {script}"))
    return service.submit(load_spec(path))


def ready(service: Service, name: str, ranks: int = 1) -> bool:
    folder = service.config.job_dir(name) / "checkpoints"
    return all((folder / f"ready-{rank}").exists() for rank in range(ranks))


def decided(service: Service, job: str, kind: DecisionKind, allocation: tuple[int, ...]) -> Decision:
    """What a round hands the backend: the decision, with the GPU type the engine read off the allocation."""
    return Decision(job, kind, allocation, gpu_type=service.launcher.cluster.allocation_type(allocation))


def status(service: Service, name: str) -> str:
    return service.store.job(name).status


def gpus(service: Service, name: str) -> int:
    return sum(service.store.job(name).allocation)


# -- arrivals and cancels -----------------------------------------------------------------------------------------
def test_an_arrival_starts_in_the_very_next_pass_on_an_idle_cluster(make, jobs_dir):
    service, _ = make()
    submit(service, jobs_dir, "new", "plain")
    service.step()  # the arrival's round, at the job's age 0
    assert status(service, "new") == "running"


def test_an_arrival_on_a_full_cluster_is_given_gpus_in_the_very_next_pass(make, jobs_dir):
    service, clock = make()
    submit(service, jobs_dir, "old", "plain")
    clock.now += 1.0
    service.step()
    assert gpus(service, "old") == 4
    clock.now += 100.0
    submit(service, jobs_dir, "new", "plain")
    service.step()
    assert status(service, "new") == "running" and 0 < gpus(service, "old") < 4


def test_slots_a_cancel_frees_go_to_a_waiting_job_in_the_same_pass(make, jobs_dir):
    service, clock = make()
    submit(service, jobs_dir, "old", "plain")
    clock.now += 1.0
    service.step()
    assert gpus(service, "old") == 4
    clock.now += 100.0
    submit(service, jobs_dir, "next", "plain")  # a user submits one job and cancels another at once
    service.cancel("old")
    service.step()
    assert status(service, "old") == "cancelled" and status(service, "next") == "running"


def test_a_job_that_finishes_while_being_stopped_frees_its_slots_for_the_next_pass(make, jobs_dir):
    service, clock = make(policy="fifo")
    submit(service, jobs_dir, "ender", "finish-on-term", gpus=2)
    submit(service, jobs_dir, "waiter", "plain", gpus=4)
    pump(service, lambda: ready(service, "ender", ranks=2), "ender to start")
    assert status(service, "waiter") == "pending"  # FIFO: 4 GPUs are not free
    clock.now += 10.0
    service.scheduler.backend.apply([decided(service, "ender", "resize", (1,))], clock())  # a round shrinks it; it ends
    assert status(service, "ender") == "completed"
    service.step()
    assert status(service, "waiter") == "running"


def test_a_start_on_free_slots_does_not_wait_for_another_jobs_checkpoint(make, jobs_dir):
    service, clock = make(policy="fifo", stop_grace_s=3.0)
    marker = service.config.job_dir("new") / "checkpoints" / "runs"  # written by the new job as it starts
    submit(service, jobs_dir, "slow", f"wait-for-marker {marker}", gpus=2)
    pump(service, lambda: ready(service, "slow", ranks=2), "slow to start")
    submit(service, jobs_dir, "new", "plain")
    clock.now += 10.0
    # a round that shrinks `slow` and starts `new` on a slot that is free already
    round_decisions = [decided(service, "slow", "resize", (1,)), decided(service, "new", "start", (1,))]
    service.scheduler.backend.apply(round_decisions, clock())
    assert status(service, "new") == "running" and gpus(service, "slow") == 1
    assert (service.config.job_dir("slow") / "checkpoints" / "clean").exists(), "slow was killed, not checkpointed"


# -- what the policy is told ---------------------------------------------------------------------------------------
def test_the_policy_gets_real_ages_and_reallocations_and_shrinks_the_job_a_restart_costs_least(make, jobs_dir):
    """Pollux's rule: a change of allocation scales a job's speedup by (T - R*delta) / (T + delta), T its age and R
    the re-allocations the scheduler made (resizes, preemptions), delta = 30 s; the fittest allocation wins. A
    crash retry is no re-allocation (the simulator, like the artifact, counts only the policy's changes). Without
    leases, as in the paper: the next test holds the shrink back until crashy's lease ends."""
    service, clock = make(lease_s=None)
    backend = service.scheduler.backend
    submit(service, jobs_dir, "veteran", "plain")
    backend.apply([decided(service, "veteran", "start", (1,))], clock())
    clock.now += 10.0
    backend.apply([decided(service, "veteran", "resize", (2,))], clock())  # one re-allocation
    clock.now += 40.0
    submit(service, jobs_dir, "crashy", "crash-first")
    backend.apply([decided(service, "crashy", "start", (2,))], clock())
    watch_until(service, clock, lambda: service.store.job("crashy").attempts == 1, "crashy to crash")
    clock.now += 6.0
    backend.apply([decided(service, "crashy", "start", (2,))], clock())  # its retry, after the back-off
    clock.now = 1100.0
    submit(service, jobs_dir, "fresh", "plain")

    views = {view.name: view for view in backend.job_views(clock())}
    assert views["veteran"].age_s(clock()) == pytest.approx(100.0) and views["veteran"].num_restarts == 1
    assert views["crashy"].age_s(clock()) == pytest.approx(50.0) and views["crashy"].num_restarts == 0
    assert views["fresh"].age_s(clock()) == 0.0 and views["fresh"].num_restarts == 0
    # factors: veteran (100 - 30) / 130 = 0.54, crashy 50 / 80 = 0.63: shrinking crashy costs least
    service.step()
    assert (gpus(service, "veteran"), gpus(service, "crashy"), gpus(service, "fresh")) == (2, 1, 1)


# -- crashes: when the retry comes, and what is said ---------------------------------------------------------------
def test_a_job_keeps_its_gpus_until_its_lease_ends_then_the_policy_may_shrink_it(make, jobs_dir):
    """The same round as above, with the runtime's lease: crashy was launched at t=56 and is leased for its restore
    (delta = 30 s) and 60 s more, so a round at t=100 keeps it on 2 GPUs and fresh waits, saying why; the round due
    at t=146, when the lease ends, shrinks it."""
    service, clock = make(lease_s=60.0)
    backend = service.scheduler.backend
    submit(service, jobs_dir, "veteran", "plain")
    backend.apply([decided(service, "veteran", "start", (1,))], clock())
    clock.now += 10.0
    backend.apply([decided(service, "veteran", "resize", (2,))], clock())
    clock.now += 46.0
    submit(service, jobs_dir, "crashy", "plain")
    backend.apply([decided(service, "crashy", "start", (2,))], clock())
    clock.now += 44.0
    submit(service, jobs_dir, "fresh", "plain")
    service.step()
    assert (gpus(service, "veteran"), gpus(service, "crashy"), gpus(service, "fresh")) == (2, 2, 0)
    assert service.reason("fresh") == "waits: the GPUs it was given are leased to another job"
    clock.now += 47.0
    service.step()  # no one asked for it: the round is due when crashy's lease ends
    assert (gpus(service, "veteran"), gpus(service, "crashy"), gpus(service, "fresh")) == (2, 1, 1)


def test_a_crashed_job_is_relaunched_when_its_back_off_ends_as_said(make, jobs_dir):
    """At the second retry the job is 91 s old with one relaunch behind it: under the artifact's rule, with the
    retry counted as a restart and delta = 100 s, its start would be worth nothing and it would wait on."""
    service, clock = make(backoff_s=30.0, max_attempts=3, restart_delay_s=100.0)
    submit(service, jobs_dir, "flaky", "--steps 100000 --step-s 0.02 --crash-after 2", script="counter.py")
    clock.now += 1.0
    pump(service, lambda: status(service, "flaky") == "running", "the first launch")
    for attempt, back_off in ((1, 30.0), (2, 60.0)):
        pump(service, lambda a=attempt: service.store.job("flaky").attempts == a, f"crash {attempt}")
        settled_at, _, said = service.store.history("flaky")[-1]
        assert f"retry {attempt}/2" in said and f"in {back_off:.0f} s" in said
        clock.now = settled_at + back_off - 0.1
        service.step()
        assert status(service, "flaky") == "pending", "relaunched before its back-off ended"
        clock.now = settled_at + back_off
        service.step()
        assert status(service, "flaky") == "running", f"retry {attempt} not launched when its back-off ended"


def test_a_retry_says_from_its_checkpoint_only_when_the_job_has_one(make, jobs_dir, tmp_path):
    service, _ = make(policy="fifo", backoff_s=60.0)
    saved = tmp_path / "saved-ckpt"
    saved.mkdir()
    (saved / "ckpt-00000007.plx").write_bytes(b"PLXCKPT1")
    submit(service, jobs_dir, "fresh", "--steps 100 --crash-after 1", script="counter.py")
    submit(service, jobs_dir, "saved", "--steps 100 --crash-after 1", script="counter.py", checkpoint_dir=str(saved))
    pump(service, lambda: all(service.store.job(n).attempts == 1 for n in ("fresh", "saved")), "both to crash")
    assert "retry 1/2 from the start in 60 s" in service.store.history("fresh")[-1][2]
    assert "retry 1/2 from its checkpoint in 60 s" in service.store.history("saved")[-1][2]


def test_a_job_that_completes_after_a_crash_shows_no_stale_error(make, jobs_dir):
    service, clock = make(policy="fifo", backoff_s=0.5)
    submit(service, jobs_dir, "bumpy", "--steps 5 --step-s 0.02 --crash-after 3", script="counter.py")
    pump(service, lambda: service.store.job("bumpy").attempts == 1, "the crash")
    assert "exit 3" in (service.store.job("bumpy").last_error or "")
    clock.now += 1.0
    pump(service, lambda: status(service, "bumpy") == "completed", "completion")
    assert service.store.job("bumpy").last_error is None
    assert any("crashed (exit 3)" in reason for _, _, reason in service.store.history("bumpy"))


def test_the_scheduler_log_has_every_launch_and_every_rounds_decisions(make, jobs_dir, caplog):
    caplog.set_level(logging.INFO, logger="pollux.runtime")
    service, clock = make(policy="fifo", backoff_s=0.5)
    submit(service, jobs_dir, "logged", "crash-first", gpus=2)
    pump(service, lambda: service.store.job("logged").attempts == 1, "the crash")
    clock.now += 1.0
    pump(service, lambda: status(service, "logged") == "running", "the retry")
    lines = [record.getMessage() for record in caplog.records if record.name == "pollux.runtime"]
    assert any("start logged 0 -> 2 GPU(s)" in line for line in lines), lines
    launches = [line for line in lines if line.startswith("job logged: launched")]
    assert len(launches) == 2, lines
    assert "2 worker(s) on (2,)" in launches[0] and "attempt 1" in launches[0] and "first start" in launches[0]
    assert "attempt 2" in launches[1] and "restart 1 (retry after a crash)" in launches[1]


def runtime_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "pollux.runtime"]


def test_a_failed_launch_is_logged_once_named_and_its_round_says_it_did_not_start(make, jobs_dir, caplog):
    caplog.set_level(logging.INFO, logger="pollux.runtime")
    service, _ = make(policy="fifo")
    spec = write_spec(jobs_dir, "nobin")
    spec.write_text(spec.read_text().replace("python counter.py ", "no-such-program-here"))
    service.submit(load_spec(spec))
    pump(service, lambda: status(service, "nobin") == "failed", "the launch to fail")
    lines = runtime_log(caplog)
    failure = next(line for line in lines if "no-such-program-here" in line)
    assert failure.startswith("job nobin: ") and "job nobin: job nobin" not in failure, lines
    (decision,) = [line for line in lines if line.startswith("round ") and "nobin" in line]
    assert decision.endswith("start nobin 0 -> 1 GPU(s) on (1,): not launched (failed)"), lines
    assert lines.index(failure) < lines.index(decision)  # the round is told after its launches, as it went


def test_a_shutdown_logs_the_jobs_it_checkpoints_and_that_it_stopped(tmp_path, jobs_dir, caplog):
    caplog.set_level(logging.INFO, logger="pollux.runtime")
    config = ServiceConfig(state_dir=tmp_path / "state", policy="fifo", interval_s=3600.0, stop_grace_s=10.0)
    service = Service(config, LocalLauncher(2, stop_grace_s=5.0))
    loop = threading.Thread(target=service.run)
    loop.start()
    try:
        submit(service, jobs_dir, "idle", "plain")
        deadline = time.monotonic() + 60
        while not (status(service, "idle") == "running" and ready(service, "idle")):
            assert time.monotonic() < deadline, "timed out waiting for the job to run"
            time.sleep(0.05)
    finally:
        service.request_shutdown()
        loop.join(60)
        service.launcher.shutdown()
    lines = runtime_log(caplog)
    assert "shutting down: 1 job(s) checkpointing" in lines and lines[-1] == "stopped", lines

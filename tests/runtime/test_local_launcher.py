"""The local launcher starts real worker processes wired like torchrun, and never loses track of one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_jobs import CRASH, ENV_DUMP, TERM_WAITER, log_lines, pid_alive, started, wait_for

from pollux.agent.report import read_report
from pollux.errors import LaunchError, UnknownJobError
from pollux.runtime import logstamp, processes
from pollux.runtime.joblog import rank_log_path, read_merged, tail
from pollux.runtime.launcher import EXIT_STOPPED, LaunchRequest, WorkerInfo
from pollux.runtime.local import LocalLauncher
from pollux.runtime.processes import process_start_ticks

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

REPO = Path(__file__).resolve().parents[2]

CHATTY = """
    import os, sys
    rank = os.environ["RANK"]
    for i in range(200):
        print(f"long {rank} " + "x" * 5000)
    print(f"out {rank}")
    print(f"err {rank}", file=sys.stderr)
    sys.stdout.write(f"tail {rank}")
"""


class Jobs:
    """Launches scripts written into tmp_path and kills whatever is left when the test ends."""

    def __init__(self, launcher: LocalLauncher, tmp_path: Path) -> None:
        self.launcher, self.tmp_path, self.started = launcher, tmp_path, []

    def script(self, name: str, source: str) -> Path:
        path = self.tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return path

    def request(self, job: str, command: tuple[str, ...], n: int, **kwargs) -> LaunchRequest:
        fields = {"allocation": (n,), "log_dir": self.tmp_path / "logs" / job, "cwd": self.tmp_path}
        return LaunchRequest(job=job, command=command, **{**fields, **kwargs})

    def start(self, job: str, source: str, n: int, **kwargs) -> list[WorkerInfo]:
        command = (sys.executable, str(self.script(job, source)), str(self.tmp_path))
        workers = self.launcher.launch(self.request(job, command, n, **kwargs))
        self.started.append(job)
        return workers

    def wait(self, job: str, timeout_s: float = 30.0) -> int:
        codes: list[int | None] = [None]

        def done() -> bool:
            codes[0] = self.launcher.poll(job)
            return codes[0] is not None

        wait_for(done, timeout_s, f"job {job} to exit")
        assert codes[0] is not None
        return codes[0]

    def cleanup(self) -> None:
        for job in self.started:
            try:
                self.launcher.kill(job)
                self.wait(job)
            except UnknownJobError:
                pass
        self.launcher.shutdown()


@pytest.fixture
def jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Jobs]:
    """Two CPU slots, whatever GPUs this machine has (an empty CUDA_VISIBLE_DEVICES hides them all)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    jobs = Jobs(LocalLauncher(slots=2, stop_grace_s=5), tmp_path)
    yield jobs
    jobs.cleanup()


def test_workers_are_wired_like_torchrun(jobs: Jobs) -> None:
    assert jobs.launcher.slot_kind == "cpu"
    assert (jobs.launcher.cluster.num_nodes, jobs.launcher.cluster.gpus_per_node) == (1, 2)
    workers = jobs.start("env", ENV_DUMP, 2, env={"FROM_REQUEST": "yes"})
    assert jobs.wait("env") == 0
    seen = [json.loads((jobs.tmp_path / f"env-{r}.json").read_text()) for r in range(2)]
    for rank, env in enumerate(seen):
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "2"
        assert (env["MASTER_ADDR"], env["POLLUX_NUM_NODES"], env["CUDA_VISIBLE_DEVICES"]) == ("127.0.0.1", "1", "")
        assert (env["PYTHONUNBUFFERED"], env["OMP_NUM_THREADS"], env["FROM_REQUEST"]) == ("1", "1", "yes")
        assert env["own_session"] and env["pdeathsig"] == signal.SIGTERM
    assert seen[0]["MASTER_PORT"] == seen[1]["MASTER_PORT"] and 0 < int(seen[0]["MASTER_PORT"]) < 65536
    assert workers == jobs.launcher.workers("env")
    assert [(w.rank, w.node, w.host) for w in workers] == [(0, 0, socket.gethostname()), (1, 0, socket.gethostname())]
    assert [(w.pid, w.start_ticks) for w in workers] == [(e["pid"], e["start_ticks"]) for e in seen]


def test_an_existing_omp_num_threads_is_kept(jobs: Jobs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    jobs.start("env", ENV_DUMP, 1)
    assert jobs.wait("env") == 0
    assert json.loads((jobs.tmp_path / "env-0.json").read_text())["OMP_NUM_THREADS"] == "3"


def test_python_runs_as_the_schedulers_own_interpreter(jobs: Jobs) -> None:
    fake_bin = jobs.tmp_path / "bin"
    fake_bin.mkdir()
    for name in ("python", "python3"):
        (fake_bin / name).write_text("#!/bin/sh\nexit 42\n")
        (fake_bin / name).chmod(0o755)
    script = str(jobs.script("env", ENV_DUMP))
    path = f"{fake_bin}{os.pathsep}{os.environ['PATH']}"
    for job, python in (("py", "python"), ("py3", "python3")):
        jobs.launcher.launch(jobs.request(job, (python, script, str(jobs.tmp_path)), 1, env={"PATH": path}))
        jobs.started.append(job)
        assert jobs.wait(job) == 0
        assert json.loads((jobs.tmp_path / "env-0.json").read_text())["executable"] == sys.executable


def test_workers_that_finish_report_0_and_free_their_slots_on_forget(jobs: Jobs) -> None:
    jobs.start("a", "pass", 2)
    with pytest.raises(LaunchError, match="0 of 2 are free"):
        jobs.start("b", "pass", 1)
    assert jobs.wait("a") == 0
    assert jobs.launcher.free_slots() == 0  # an exited group holds its slots until forgotten
    jobs.launcher.forget("a")
    assert jobs.launcher.free_slots() == 2
    with pytest.raises(UnknownJobError):
        jobs.launcher.poll("a")
    jobs.start("b", "pass", 2)
    assert jobs.wait("b") == 0


def test_allocations_beyond_the_free_slots_or_this_node_are_refused(jobs: Jobs) -> None:
    jobs.start("long", TERM_WAITER, 1)
    command = (sys.executable, "-c", "pass")
    for allocation, message, transient in [
        ((2,), "asks for 2 CPU slots; 1 of 2 are free", True),  # the other job will end
        ((3,), "asks for 3 CPU slots", False),  # this node never has 3
        ((0,), "asks for 0", False),
        ((1, 1), "2 nodes", False),
    ]:
        with pytest.raises(LaunchError, match=message) as refused:
            jobs.launcher.launch(jobs.request("other", command, 1, allocation=allocation))
        assert refused.value.transient is transient, allocation
    with pytest.raises(LaunchError, match="still running"):
        jobs.start("long", TERM_WAITER, 1)
    with pytest.raises(RuntimeError, match="running"):
        jobs.launcher.forget("long")
    jobs.start("other", "pass", 1)  # the one free slot
    assert jobs.wait("other") == 0


def test_stop_sends_sigterm_and_the_group_reports_143(jobs: Jobs) -> None:
    jobs.start("job", TERM_WAITER, 2)
    wait_for(lambda: all((jobs.tmp_path / f"ready-{r}").exists() for r in range(2)), what="workers ready")
    assert jobs.launcher.poll("job") is None
    jobs.launcher.stop("job")
    assert jobs.wait("job") == EXIT_STOPPED
    assert all((jobs.tmp_path / f"term-{r}").read_text() == "ok" for r in range(2))


def test_kill_reports_137(jobs: Jobs) -> None:
    workers = jobs.start("job", TERM_WAITER, 2)
    wait_for(lambda: all((jobs.tmp_path / f"ready-{r}").exists() for r in range(2)), what="workers ready")
    jobs.launcher.kill("job")
    assert jobs.wait("job") == 137
    assert not any((jobs.tmp_path / f"term-{r}").exists() for r in range(2))
    assert not any(pid_alive(w.pid, w.start_ticks) for w in workers)


def test_a_crash_kills_the_siblings_and_their_helpers_and_reports_its_code(jobs: Jobs) -> None:
    workers = jobs.start("job", CRASH, 2)
    helper = jobs.tmp_path / "helper"
    wait_for(helper.exists, what="rank 1's helper")
    helper_process = started(int(helper.read_text()))  # alive now: it sleeps 60 s unless killed
    assert jobs.wait("job") == 3  # within the wait's 30 s, so rank 1 did not sleep its 60 s: it was killed
    assert not pid_alive(workers[1].pid, workers[1].start_ticks)
    wait_for(lambda: not pid_alive(*helper_process), timeout=5, what="the helper to die")


def test_each_rank_writes_its_own_log_and_a_relaunch_appends(jobs: Jobs) -> None:
    logs = jobs.tmp_path / "deep" / "logs" / "job"
    jobs.start("job", CHATTY, 2, log_dir=logs)
    assert jobs.wait("job") == 0
    for rank in range(2):
        lines = log_lines(rank_log_path(logs, rank))
        assert lines[0].startswith("[pollux] ") and lines[0].endswith(f"rank {rank} of 2 on {socket.gethostname()}")
        assert lines.count(f"long {rank} " + "x" * 5000) == 200  # whole lines: nobody else writes this file
        assert {f"out {rank}", f"err {rank}", f"tail {rank}"} <= set(lines)
    jobs.launcher.forget("job")
    jobs.start("job", "print('again')", 1, log_dir=logs)
    assert jobs.wait("job") == 0
    lines = log_lines(rank_log_path(logs, 0))
    assert lines[-2].endswith("rank 0 of 1 on " + socket.gethostname()) and lines[-1] == "again"  # appended
    merged = read_merged(logs, partial=True)[0].splitlines()
    assert "[rank 0] again" in merged and "[rank 1] tail 1" in merged


def test_a_missing_executable_or_cwd_is_refused_before_anything_starts(jobs: Jobs) -> None:
    bad = [
        (("no-such-program-pollux",), {}, "'no-such-program-pollux' is not on PATH"),
        (("./missing.sh",), {}, "missing.sh does not exist"),
        (("python", "-c", "pass"), {"cwd": jobs.tmp_path / "nowhere"}, "nowhere does not exist"),
    ]
    for command, kwargs, message in bad:
        with pytest.raises(LaunchError, match=message) as refused:
            jobs.launcher.launch(jobs.request("bad", command, 2, **kwargs))
        assert not refused.value.transient  # retrying cannot help: someone must fix the job
        with pytest.raises(UnknownJobError):
            jobs.launcher.poll("bad")
        assert jobs.launcher.free_slots() == 2


def test_reap_stops_strays_but_not_a_process_that_reused_a_pid(jobs: Jobs) -> None:
    ignores_term = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True)"
    strays = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True),
        subprocess.Popen(
            [sys.executable, "-c", f"{ignores_term}; time.sleep(60)"], stdout=subprocess.PIPE, start_new_session=True
        ),
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True),
    ]
    try:
        strays[1].stdout.readline()  # its SIGTERM is ignored from now on
        host = socket.gethostname()
        ticks = [process_start_ticks(p.pid) for p in strays]
        recorded = [
            WorkerInfo(rank=i, node=0, pid=p.pid, host=host, start_ticks=t)
            for i, (p, t) in enumerate(zip(strays, ticks, strict=True))
        ]
        recorded[2] = WorkerInfo(rank=2, node=0, pid=strays[2].pid, host=host, start_ticks=ticks[2] + 1)
        reaper = LocalLauncher(slots=1, stop_grace_s=1.0)
        assert reaper.reap(recorded) == 2
        assert strays[0].wait(timeout=10) == -signal.SIGTERM
        assert strays[1].wait(timeout=10) == -signal.SIGKILL  # after the grace period
        assert strays[2].poll() is None and pid_alive(strays[2].pid)
        assert reaper.reap(recorded[:2]) == 0
    finally:
        for p in strays:
            p.kill()
            p.wait()
        strays[1].stdout.close()


def test_a_new_scheduler_cannot_start_a_job_whose_previous_group_still_runs(jobs: Jobs) -> None:
    # The first scheduler died before it recorded its workers: the second one cannot reap them, only wait.
    lock = jobs.tmp_path / "jobs" / "job" / "group.lock"
    workers = jobs.start("job", TERM_WAITER, 2, lock_path=lock)
    wait_for(lambda: all((jobs.tmp_path / f"ready-{r}").exists() for r in range(2)), what="workers ready")
    second = LocalLauncher(slots=2, stop_grace_s=0.2)
    request = jobs.request("job", (sys.executable, "-c", "print('second')"), 1, lock_path=lock)
    started = time.monotonic()
    with pytest.raises(LaunchError, match="previous worker group is still running") as refused:
        second.launch(request)
    assert refused.value.transient
    assert f"pids {workers[0].pid}, {workers[1].pid} hold" in str(refused.value)
    assert time.monotonic() - started >= 0.2  # it gave the old group its grace period
    assert second.free_slots() == 2
    with pytest.raises(UnknownJobError):
        second.poll("job")
    jobs.launcher.stop("job")
    assert jobs.wait("job") == EXIT_STOPPED
    second.launch(request)  # the lock went with the last worker
    wait_for(lambda: second.poll("job") is not None, what="the second group to finish")
    assert second.poll("job") == 0
    assert "second" in log_lines(rank_log_path(request.log_dir, 0))


SCHEDULER = """
    import sys, time
    from pathlib import Path
    from pollux.runtime.launcher import LaunchRequest
    from pollux.runtime.local import LocalLauncher
    out, worker = Path(sys.argv[1]), sys.argv[2]
    launcher = LocalLauncher(slots=1)
    launcher.launch(LaunchRequest(job="job", command=("python", worker, str(out)), allocation=(1,),
                                  log_dir=out / "logs", cwd=out))
    time.sleep(60)
"""


# On SIGTERM, prints a burst of lines on the way to its "checkpoint" (a marker file), as a training script does.
TERM_PRINTER = """
    import os, signal, sys, time
    out, rank = sys.argv[1], os.environ["RANK"]
    stop = False
    def on_term(signum, frame):
        global stop
        stop = True
    signal.signal(signal.SIGTERM, on_term)
    open(os.path.join(out, f"ready-{rank}"), "w").write(str(os.getpid()))
    for _ in range(600):
        if stop:
            for i in range(200):
                print(f"saving {i}", flush=True)
            open(os.path.join(out, f"term-{rank}"), "w").write("ok")
            sys.exit(143)
        print("step", flush=True)
        time.sleep(0.05)
"""


def test_workers_get_sigterm_and_checkpoint_when_the_scheduler_is_killed(jobs: Jobs) -> None:
    # Their output never passes through the scheduler: printing after its death must not kill them (issue 15).
    out = jobs.tmp_path
    worker, scheduler = jobs.script("worker", TERM_PRINTER), jobs.script("scheduler", SCHEDULER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(scheduler), str(out), str(worker)], env=env, start_new_session=True)
    worker_process: tuple[int, int | None] | None = None
    try:
        wait_for((out / "ready-0").exists, what="the scheduler's worker")
        worker_process = started(int((out / "ready-0").read_text()))
        proc.kill()
        proc.wait()
        wait_for((out / "term-0").exists, timeout=10, what="the worker's checkpoint marker")
        wait_for(lambda: not pid_alive(*worker_process), timeout=10, what="the orphaned worker to exit")
        log = rank_log_path(out / "logs", 0)  # its stamper outlives the scheduler too, and writes a moment after
        wait_for(lambda: "saving 199" in log_lines(log), timeout=10, what="the worker's last line in its log")
    finally:
        proc.kill()
        proc.wait()
        if worker_process is not None and pid_alive(*worker_process):  # that very process, not a pid's new owner
            os.kill(worker_process[0], signal.SIGKILL)


needs_setpriv = pytest.mark.skipif(processes._setpriv() is None, reason="no setpriv with --pdeathsig on this machine")


def spy_on_popen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], object]]:
    """Record the command and `preexec_fn` of every worker started from now on (not of their logs' stampers)."""
    calls: list[tuple[list[str], object]] = []
    real = subprocess.Popen

    def spy(args, *rest, **kwargs):
        if logstamp.__file__ not in args:
            calls.append((list(args), kwargs.get("preexec_fn")))
        return real(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    return calls


@needs_setpriv
def test_setpriv_arms_the_parent_death_signal_without_a_preexec_hook(
    jobs: Jobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = spy_on_popen(monkeypatch)
    (worker,) = jobs.start("env", ENV_DUMP, 1)
    assert jobs.wait("env") == 0
    ((argv, preexec_fn),) = calls
    assert (Path(argv[0]).name, preexec_fn) == ("setpriv", None)  # a preexec_fn can deadlock a threaded parent
    seen = json.loads((jobs.tmp_path / "env-0.json").read_text())
    assert (seen["pdeathsig"], seen["executable"]) == (signal.SIGTERM, sys.executable)
    assert (worker.pid, worker.start_ticks) == (seen["pid"], seen["start_ticks"])  # setpriv and sh exec the command


def test_without_setpriv_a_preexec_hook_arms_the_parent_death_signal(
    jobs: Jobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "_setpriv", lambda: None)
    calls = spy_on_popen(monkeypatch)
    jobs.start("env", ENV_DUMP, 1)
    assert jobs.wait("env") == 0
    ((argv, preexec_fn),) = calls
    assert argv[0] == sys.executable and preexec_fn is not None
    assert json.loads((jobs.tmp_path / "env-0.json").read_text())["pdeathsig"] == signal.SIGTERM


@needs_setpriv
def test_a_worker_whose_launcher_died_before_the_signal_was_armed_exits_at_once(tmp_path: Path) -> None:
    argv, _ = processes.die_with_parent([sys.executable, "-c", f"open({str(tmp_path / 'ran')!r}, 'w')"])
    assert argv[7] == str(os.getpid())  # `sh -c CHECK <launcher pid> command...`
    argv[7] = "1"  # as if the launcher had died and the worker had been adopted
    assert subprocess.run(argv, check=False).returncode == EXIT_STOPPED
    assert not (tmp_path / "ran").exists()


def test_gpu_slots_follow_nvidia_smi_and_cuda_visible_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "nvidia-smi").write_text("#!/bin/sh\nprintf '0\\n1\\n2\\n3\\n'\n")
    (fake_bin / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert LocalLauncher().cluster.gpus_per_node == 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    launcher = LocalLauncher()
    assert (launcher.slot_kind, launcher.cluster.gpus_per_node) == ("gpu", 2)
    jobs = Jobs(launcher, tmp_path)
    try:
        jobs.start("env", ENV_DUMP, 2)
        assert jobs.wait("env") == 0
        visible = [json.loads((tmp_path / f"env-{r}.json").read_text())["CUDA_VISIBLE_DEVICES"] for r in range(2)]
        assert visible == ["1", "3"]
    finally:
        jobs.cleanup()
    assert LocalLauncher(slots=1).cluster.gpus_per_node == 1


def test_two_agent_workers_train_the_digits_example(jobs: Jobs) -> None:
    pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
    pytest.importorskip("sklearn", reason="the examples need it: make test installs it (pip install -e '.[examples]')")
    report = jobs.tmp_path / "report.json"
    env = {"POLLUX_CHECKPOINT_DIR": str(jobs.tmp_path / "ckpt"), "POLLUX_REPORT_PATH": str(report)}
    command = ("python", str(REPO / "examples" / "digits_mlp.py"), "--epochs", "1")
    logs = jobs.tmp_path / "digits-logs"
    jobs.launcher.launch(jobs.request("digits", command, 2, env=env, cwd=REPO, log_dir=logs))
    jobs.started.append("digits")
    code = jobs.wait("digits", timeout_s=120)
    assert code == 0, tail(logs, 40)
    assert "[rank 0] epoch   0  loss" in read_merged(logs)[0]
    done = read_report(report)
    assert (done.status, done.batch.num_replicas) == ("finished", 2)

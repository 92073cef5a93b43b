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
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pollux.agent.report import read_report
from pollux.errors import LaunchError, UnknownJobError
from pollux.runtime.launcher import EXIT_STOPPED, LaunchRequest, WorkerInfo
from pollux.runtime.local import LocalLauncher, process_start_ticks

REPO = Path(__file__).resolve().parents[2]

# Each worker script gets the test's tmp_path as argv[1] and leaves its traces there.
ENV_DUMP = """
    import json, os, sys
    keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "POLLUX_NUM_NODES",
            "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "OMP_NUM_THREADS", "FROM_REQUEST"]
    stat = open("/proc/self/stat").read()
    info = {k: os.environ.get(k) for k in keys}
    info.update(pid=os.getpid(), own_session=os.getsid(0) == os.getpid(), executable=sys.executable,
                start_ticks=int(stat[stat.rfind(")") + 2:].split()[19]))
    open(os.path.join(sys.argv[1], f"env-{os.environ['RANK']}.json"), "w").write(json.dumps(info))
"""

# Waits for SIGTERM (at most 60 s), then leaves a marker and exits 143 as the agent does after checkpointing.
TERM_WAITER = """
    import os, signal, sys, time
    out, rank = sys.argv[1], os.environ["RANK"]
    def on_term(signum, frame):
        open(os.path.join(out, f"term-{rank}"), "w").write("ok")
        sys.exit(143)
    signal.signal(signal.SIGTERM, on_term)
    open(os.path.join(out, f"ready-{rank}"), "w").write(str(os.getpid()))
    for _ in range(600):
        time.sleep(0.1)
"""

# Rank 1 starts a helper process and sleeps; rank 0 crashes with 3 once rank 1 and its helper are up.
CRASH = """
    import os, subprocess, sys, time
    out, rank = sys.argv[1], os.environ["RANK"]
    if rank == "1":
        helper = subprocess.Popen(["sleep", "60"])
        open(os.path.join(out, "helper.tmp"), "w").write(str(helper.pid))
        os.rename(os.path.join(out, "helper.tmp"), os.path.join(out, "helper"))
        time.sleep(60)
    else:
        for _ in range(300):
            if os.path.exists(os.path.join(out, "helper")):
                sys.exit(3)
            time.sleep(0.05)
"""

CHATTY = """
    import os, sys
    rank = os.environ["RANK"]
    for i in range(200):
        print(f"long {rank} " + "x" * 5000)
    print(f"out {rank}")
    print(f"err {rank}", file=sys.stderr)
    sys.stdout.write(f"tail {rank}")
"""


def running(pid: int) -> bool:
    """Whether the process exists and is not a zombie (state field of /proc/<pid>/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def wait_for(condition: Callable[[], object], timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


class Jobs:
    """Launches scripts written into tmp_path and kills whatever is left when the test ends."""

    def __init__(self, launcher: LocalLauncher, tmp_path: Path) -> None:
        self.launcher, self.tmp_path, self.started = launcher, tmp_path, []

    def script(self, name: str, source: str) -> Path:
        path = self.tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return path

    def request(self, job: str, command: tuple[str, ...], n: int, **kwargs) -> LaunchRequest:
        fields = {"allocation": (n,), "log_path": self.tmp_path / "logs" / f"{job}.log", "cwd": self.tmp_path}
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
        assert env["own_session"]
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
    for allocation, message in [
        ((2,), "asks for 2 CPU slots; 1 of 2 are free"),
        ((0,), "asks for 0"),
        ((1, 1), "2 nodes"),
    ]:
        with pytest.raises(LaunchError, match=message):
            jobs.launcher.launch(jobs.request("other", command, 1, allocation=allocation))
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
    assert not any(running(w.pid) for w in workers)


def test_a_crash_kills_the_siblings_and_their_helpers_and_reports_its_code(jobs: Jobs) -> None:
    workers = jobs.start("job", CRASH, 2)
    helper = jobs.tmp_path / "helper"
    wait_for(helper.exists, what="rank 1's helper")
    started = time.monotonic()
    assert jobs.wait("job") == 3
    assert time.monotonic() - started < 10.0  # not the 60 s rank 1 would sleep
    assert not running(workers[1].pid)
    wait_for(lambda: not running(int(helper.read_text())), timeout_s=5, what="the helper to die")


def test_output_is_appended_to_the_log_line_by_line_with_the_rank(jobs: Jobs) -> None:
    log = jobs.tmp_path / "deep" / "logs" / "job.log"
    jobs.start("job", CHATTY, 2, log_path=log)
    assert jobs.wait("job") == 0
    lines = log.read_text().splitlines()
    assert len(lines) == 2 * 203
    for rank in range(2):
        mine = [line for line in lines if line.startswith(f"[rank {rank}] ")]
        assert mine.count(f"[rank {rank}] long {rank} " + "x" * 5000) == 200  # whole lines, never interleaved
        assert {f"[rank {rank}] out {rank}", f"[rank {rank}] err {rank}", f"[rank {rank}] tail {rank}"} <= set(mine)
    jobs.launcher.forget("job")
    jobs.start("job", "print('again')", 1, log_path=log)
    assert jobs.wait("job") == 0
    assert log.read_text().splitlines()[-1] == "[rank 0] again"  # appended, not overwritten


def test_a_missing_executable_or_cwd_is_refused_before_anything_starts(jobs: Jobs) -> None:
    bad = [
        (("no-such-program-pollux",), {}, "'no-such-program-pollux' is not on PATH"),
        (("./missing.sh",), {}, "missing.sh does not exist"),
        (("python", "-c", "pass"), {"cwd": jobs.tmp_path / "nowhere"}, "nowhere does not exist"),
    ]
    for command, kwargs, message in bad:
        with pytest.raises(LaunchError, match=message):
            jobs.launcher.launch(jobs.request("bad", command, 2, **kwargs))
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
        assert strays[2].poll() is None and running(strays[2].pid)
        assert reaper.reap(recorded[:2]) == 0
    finally:
        for p in strays:
            p.kill()
            p.wait()
        strays[1].stdout.close()


SCHEDULER = """
    import sys, time
    from pathlib import Path
    from pollux.runtime.launcher import LaunchRequest
    from pollux.runtime.local import LocalLauncher
    out, worker = Path(sys.argv[1]), sys.argv[2]
    launcher = LocalLauncher(slots=1)
    launcher.launch(LaunchRequest(job="job", command=("python", worker, str(out)), allocation=(1,),
                                  log_path=out / "job.log", cwd=out))
    time.sleep(60)
"""


def test_workers_get_sigterm_when_the_scheduler_is_killed(jobs: Jobs) -> None:
    out = jobs.tmp_path
    worker, scheduler = jobs.script("worker", TERM_WAITER), jobs.script("scheduler", SCHEDULER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(scheduler), str(out), str(worker)], env=env, start_new_session=True)
    try:
        wait_for((out / "ready-0").exists, what="the scheduler's worker")
        pid = int((out / "ready-0").read_text())
        proc.kill()
        proc.wait()
        wait_for((out / "term-0").exists, timeout_s=10, what="the worker's SIGTERM marker")
        wait_for(lambda: not running(pid), timeout_s=10, what="the orphaned worker to exit")
    finally:
        proc.kill()
        proc.wait()
        if (out / "ready-0").exists() and running(pid := int((out / "ready-0").read_text())):
            os.kill(pid, signal.SIGKILL)


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
    report = jobs.tmp_path / "report.json"
    env = {"POLLUX_CHECKPOINT_DIR": str(jobs.tmp_path / "ckpt"), "POLLUX_REPORT_PATH": str(report)}
    command = ("python", str(REPO / "examples" / "digits_mlp.py"), "--epochs", "1")
    log = jobs.tmp_path / "digits.log"
    jobs.launcher.launch(jobs.request("digits", command, 2, env=env, cwd=REPO, log_path=log))
    jobs.started.append("digits")
    code = jobs.wait("digits", timeout_s=120)
    assert code == 0, log.read_text()[-3000:]
    assert "[rank 0] epoch   0  loss" in log.read_text()
    done = read_report(report)
    assert (done.status, done.batch.num_replicas) == ("finished", 2)

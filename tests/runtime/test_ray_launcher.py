"""The Ray launcher places each rank on exactly the node its allocation names, on a real two-node Ray cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from runtime_jobs import CRASH, ENV_DUMP, TERM_WAITER, wait_for

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster as RayCluster  # noqa: E402

from pollux.agent.report import read_report  # noqa: E402
from pollux.cluster import Cluster  # noqa: E402
from pollux.errors import LaunchError, UnknownJobError  # noqa: E402
from pollux.runtime.joblog import read_merged  # noqa: E402
from pollux.runtime.launcher import EXIT_NODE_LOST, EXIT_STOPPED, LaunchRequest, WorkerInfo  # noqa: E402
from pollux.runtime.processes import process_start_ticks  # noqa: E402
from pollux.runtime.ray_launcher import EXIT_LOST, RayLauncher  # noqa: E402

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

REPO = Path(__file__).resolve().parents[2]
RESOURCE = "pollux_gpu"


def free_gpus() -> float:
    return ray.available_resources().get(RESOURCE, 0.0)


def live_placement_groups() -> list[dict]:
    return [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]


NODE_ARGS = {"num_cpus": 2, "resources": {RESOURCE: 2}, "object_store_memory": 80 * 1024 * 1024}


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """A head node and a worker node on this machine, two virtual GPUs (`pollux_gpu`) each; torn down by its own
    handle."""
    if ray.is_initialized():
        pytest.skip("Ray is already initialised in this process")
    cluster = RayCluster(initialize_head=True, head_node_args=NODE_ARGS)
    try:
        cluster.add_node(**NODE_ARGS)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module")
def launcher(ray_cluster: RayCluster) -> Iterator[RayLauncher]:
    """A launcher on `ray_cluster`: it connects, and so disconnects on shutdown."""
    ray_launcher = RayLauncher(ray_cluster.address, gpu_resource=RESOURCE, stop_grace_s=5, placement_timeout_s=3)
    try:
        yield ray_launcher
    finally:
        ray_launcher.shutdown()


class Jobs:
    """Launches scripts written into tmp_path and kills whatever is left of them when the test ends."""

    def __init__(self, launcher: RayLauncher, tmp_path: Path) -> None:
        self.launcher, self.tmp_path, self.started = launcher, tmp_path, []

    def request(self, job: str, command: tuple[str, ...], allocation: tuple[int, ...], **kwargs) -> LaunchRequest:
        fields = {"allocation": allocation, "log_dir": self.tmp_path / "logs" / job, "cwd": self.tmp_path}
        return LaunchRequest(job=job, command=command, **{**fields, **kwargs})

    def start(self, job: str, source: str, allocation: tuple[int, ...], **kwargs) -> list[WorkerInfo]:
        script = self.tmp_path / f"{job}.py"
        script.write_text(textwrap.dedent(source))
        workers = self.launcher.launch(
            self.request(job, ("python", str(script), str(self.tmp_path)), allocation, **kwargs)
        )
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
                self.launcher.forget(job)
            except UnknownJobError:
                pass


@pytest.fixture
def jobs(launcher: RayLauncher, tmp_path: Path) -> Iterator[Jobs]:
    jobs = Jobs(launcher, tmp_path)
    yield jobs
    jobs.cleanup()
    wait_for(lambda: free_gpus() == 4, 10, "every virtual GPU to be free again")


def test_the_pool_is_every_node_offering_the_resource_in_node_id_order(launcher: RayLauncher) -> None:
    assert launcher.cluster == Cluster(num_nodes=2, gpus_per_node=2, gpu_type="gpu")  # Ray names no GPU model
    assert launcher.node_ids == sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])


def test_a_job_on_two_nodes_gets_one_rank_per_node_in_pool_order(jobs: Jobs) -> None:
    workers = jobs.start("env", ENV_DUMP, (1, 1), env={"FROM_REQUEST": "yes"})
    ((name, bundles),) = [(pg["name"], pg["bundles_to_node_id"]) for pg in live_placement_groups()]
    assert bundles == dict(enumerate(jobs.launcher.node_ids))  # Ray's own record of where it reserved the GPUs
    assert name == "pollux-env" and ray.get_actor("pollux-env-1", namespace="pollux")
    assert jobs.wait("env") == 0
    seen = [json.loads((jobs.tmp_path / f"env-{rank}.json").read_text()) for rank in range(2)]
    assert [env["POLLUX_RAY_NODE_ID"] for env in seen] == jobs.launcher.node_ids
    for rank, env in enumerate(seen):
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (
            str(rank),
            "0",
            "2",
            "1",
        )
        assert (env["POLLUX_NUM_NODES"], env["CUDA_VISIBLE_DEVICES"], env["FROM_REQUEST"]) == ("2", "", "yes")
        assert (env["PYTHONUNBUFFERED"], env["OMP_NUM_THREADS"]) == ("1", "1")
        assert (env["executable"], env["cwd"], env["pdeathsig"]) == (sys.executable, str(jobs.tmp_path), signal.SIGTERM)
    assert seen[0]["MASTER_ADDR"] == seen[1]["MASTER_ADDR"] == workers[0].host
    assert seen[0]["MASTER_PORT"] == seen[1]["MASTER_PORT"] and 0 < int(seen[0]["MASTER_PORT"]) < 65536
    assert workers == jobs.launcher.workers("env")
    assert [(w.rank, w.node, w.pid, w.start_ticks) for w in workers] == [
        (rank, rank, env["pid"], env["start_ticks"]) for rank, env in enumerate(seen)
    ]
    log = read_merged(jobs.tmp_path / "logs" / "env")[0].splitlines()
    # two processes on two nodes print at once: the merged log keeps each line whole, in no set order between ranks
    assert sorted(line for line in log if "[pollux]" not in line) == ["[rank 0] hello from 0", "[rank 1] hello from 1"]


def test_a_job_on_one_node_keeps_both_ranks_there(jobs: Jobs) -> None:
    jobs.start("env", ENV_DUMP, (2, 0))
    assert jobs.wait("env") == 0
    seen = [json.loads((jobs.tmp_path / f"env-{rank}.json").read_text()) for rank in range(2)]
    assert [env["POLLUX_RAY_NODE_ID"] for env in seen] == [jobs.launcher.node_ids[0]] * 2
    assert [(env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["POLLUX_NUM_NODES"]) for env in seen] == [
        ("0", "2", "1"),
        ("1", "2", "1"),
    ]
    assert [w.node for w in jobs.launcher.workers("env")] == [0, 0]


def test_stop_makes_every_worker_checkpoint_and_exit_143(jobs: Jobs) -> None:
    jobs.start("stop", TERM_WAITER, (1, 1))
    wait_for(lambda: all((jobs.tmp_path / f"ready-{r}").exists() for r in range(2)), 30, "both workers to start")
    assert jobs.launcher.poll("stop") is None
    with pytest.raises(RuntimeError, match="running"):
        jobs.launcher.forget("stop")
    jobs.launcher.stop("stop")
    assert jobs.wait("stop") == EXIT_STOPPED
    assert all((jobs.tmp_path / f"term-{r}").exists() for r in range(2))


def test_a_crash_kills_the_siblings_and_reports_the_crash_code(jobs: Jobs) -> None:
    workers = jobs.start("crash", CRASH, (1, 1))
    assert jobs.wait("crash") == 3
    helper = int((jobs.tmp_path / "helper").read_text())
    wait_for(lambda: all(process_start_ticks(pid) is None for pid in [w.pid for w in workers] + [helper]), 5, "death")


def test_kill_ends_the_workers_at_once_and_reports_them_killed(jobs: Jobs) -> None:
    workers = jobs.start("kill", TERM_WAITER, (0, 2))
    wait_for(lambda: all((jobs.tmp_path / f"ready-{r}").exists() for r in range(2)), 30, "both workers to start")
    jobs.launcher.kill("kill")
    assert jobs.wait("kill") == EXIT_LOST == 137
    assert not any((jobs.tmp_path / f"term-{r}").exists() for r in range(2))  # SIGKILL: no checkpoint
    assert all(process_start_ticks(w.pid) is None for w in workers)


def test_a_missing_executable_is_refused_and_everything_released(jobs: Jobs) -> None:
    with pytest.raises(LaunchError, match="no-such-program-pollux") as refused:
        jobs.launcher.launch(jobs.request("missing", ("no-such-program-pollux", "--flag"), (1, 1)))
    assert not refused.value.transient
    with pytest.raises(UnknownJobError):
        jobs.launcher.poll("missing")
    wait_for(lambda: not live_placement_groups() and free_gpus() == 4, 10, "the placement group to be removed")


def test_an_allocation_beyond_a_node_or_the_pool_is_refused(jobs: Jobs) -> None:
    for allocation in [(3, 0), (1,), (0, 0), (1, -1)]:
        with pytest.raises(LaunchError, match="allocation") as refused:
            jobs.launcher.launch(jobs.request("big", ("true",), allocation))
        assert not refused.value.transient
    assert not live_placement_groups()


def test_gpus_held_by_another_job_make_a_launch_time_out(jobs: Jobs) -> None:
    jobs.start("holder", TERM_WAITER, (2, 0))
    started = time.monotonic()
    with pytest.raises(LaunchError, match="could not reserve") as refused:
        jobs.launcher.launch(jobs.request("late", ("true",), (1, 0)))
    assert time.monotonic() - started >= 3  # it waited the placement timeout before giving up
    assert refused.value.transient  # the holder will end
    assert len(live_placement_groups()) == 1  # the late job's group is gone, the holder's stays


def test_a_node_that_failed_a_reservation_is_refused_and_left_out_of_the_pool_for_a_while(
    jobs: Jobs, launcher: RayLauncher
) -> None:
    from ray.util.placement_group import placement_group, remove_placement_group

    first, second = launcher.node_ids
    outsider = placement_group([{RESOURCE: 2}], bundle_label_selector=[{"ray.io/node-id": second}])  # not ours
    try:
        assert outsider.wait(30)
        wary = RayLauncher(gpu_resource=RESOURCE, stop_grace_s=0.5, placement_timeout_s=2)  # its own quarantines
        with pytest.raises(LaunchError, match="could not reserve"):
            wary.launch(jobs.request("blocked", ("true",), (0, 1)))
        with pytest.raises(LaunchError, match="failed a reservation lately") as refused:  # no second wait
            wary.launch(jobs.request("blocked", ("true",), (0, 1)))
        assert refused.value.transient
        assert wary.refresh() == {0: 0} and wary.node_ids == [first]  # the autoscaled pool leaves it out
        wary.shutdown()
    finally:
        remove_placement_group(outsider)


# Rank "victim" (on the node the test removes) sleeps; its sibling fails as soon as the victim's process is gone,
# as a rank whose peer vanished fails in the next collective: with Ray's default health checks (5 misses, 3 s
# apart), some 10 s before Ray declares the node dead.
PEER_LOST = """
    import os, sys, time
    out = sys.argv[1]
    if os.environ["POLLUX_RAY_NODE_ID"] == open(os.path.join(out, "doomed")).read():
        open(os.path.join(out, "victim.tmp"), "w").write(str(os.getpid()))
        os.rename(os.path.join(out, "victim.tmp"), os.path.join(out, "victim"))
        time.sleep(120)
    else:
        while True:
            try:
                os.kill(int(open(os.path.join(out, "victim")).read()), 0)
            except FileNotFoundError:
                pass
            except ProcessLookupError:
                sys.exit(1)
            time.sleep(0.05)
"""


@contextmanager
def node_to_lose(ray_cluster: RayCluster, launcher: RayLauncher, restored_within_s: float) -> Iterator[Any]:
    """A third node for a test to lose; afterwards it is gone (removed here if the test failed before removing it)
    and `launcher` sees the module's two nodes again within `restored_within_s`."""
    doomed = ray_cluster.add_node(**{**NODE_ARGS, "resources": {RESOURCE: 1}})
    ray_cluster.wait_for_nodes()
    try:
        yield doomed
    finally:
        if doomed in ray_cluster.worker_nodes:
            ray_cluster.remove_node(doomed, allow_graceful=False)
        wait_for(
            lambda: launcher.refresh() is None and len(launcher.node_ids) == 2,
            restored_within_s,
            "the pool of two nodes",
        )


def test_a_group_across_a_lost_node_exits_node_lost_even_when_a_sibling_crashed_first(
    jobs: Jobs, launcher: RayLauncher, ray_cluster: RayCluster
) -> None:
    with node_to_lose(ray_cluster, launcher, 30) as doomed:
        assert launcher.refresh() is not None and doomed.node_id in launcher.node_ids
        (jobs.tmp_path / "doomed").write_text(doomed.node_id)
        allocation = [0] * 3
        allocation[launcher.node_ids.index(doomed.node_id)] = 1
        allocation[next(i for i, n in enumerate(launcher.node_ids) if n != doomed.node_id)] = 1
        jobs.start("spread", PEER_LOST, tuple(allocation))
        wait_for(lambda: (jobs.tmp_path / "victim").exists(), 30, "the rank on the doomed node")
        ray_cluster.remove_node(doomed, allow_graceful=False)  # a machine lost: its processes die, its peer fails
        polls: list[float] = []

        def exited() -> int | None:
            started = time.monotonic()
            code = launcher.poll("spread")
            polls.append(time.monotonic() - started)
            return code

        code = wait_for(exited, 60, "the group to exit")
        print(f"\n{len(polls)} polls until the group's code, the longest {max(polls):.1f} s")
        assert code == EXIT_NODE_LOST  # not the sibling's 1: the job resumes, no crash counted


def test_a_launch_onto_a_lost_node_ray_still_lists_alive_gives_up_and_leaves_the_node_out(
    jobs: Jobs, launcher: RayLauncher, ray_cluster: RayCluster
) -> None:
    with node_to_lose(ray_cluster, launcher, 60) as doomed:
        wary = RayLauncher(gpu_resource=RESOURCE, stop_grace_s=0.5, placement_timeout_s=3)  # its own quarantines
        allocation = tuple(int(node == doomed.node_id) for node in wary.node_ids)
        ray_cluster.remove_node(doomed, allow_graceful=False)  # Ray's default health checks take ~15 s to notice
        with pytest.raises(LaunchError, match=r"could not reserve|is not alive|died while") as first:
            wary.launch(jobs.request("late", ("true",), allocation))
        assert first.value.transient
        print(f"\nthe launch onto the lost node: {first.value}")
        if "could not reserve" in str(first.value):  # Ray still listed it alive: refused at once from now on
            with pytest.raises(LaunchError, match="failed a reservation lately"):
                wary.launch(jobs.request("late", ("true",), allocation))
        wait_for(lambda: wary.refresh() is not None, 60, "Ray to declare the node dead")
        assert doomed.node_id not in wary.node_ids and len(wary.node_ids) == 2
        wary.shutdown()


def test_a_launch_waiting_for_gpus_does_not_block_the_other_jobs(jobs: Jobs) -> None:
    jobs.start("holder", TERM_WAITER, (2, 0))
    wait_for(lambda: (jobs.tmp_path / "ready-1").exists(), 30, "the holder's workers")
    outcome: list[BaseException] = []

    def launch_late() -> None:
        try:
            jobs.launcher.launch(jobs.request("late", ("true",), (1, 0)))
        except LaunchError as error:
            outcome.append(error)

    late = threading.Thread(target=launch_late)
    late.start()
    wait_for(lambda: "late" in jobs.launcher._launching, 10, "the late launch to wait on Ray")
    assert jobs.launcher.poll("holder") is None  # answered while the launch still waits for GPUs
    jobs.launcher.stop("holder")
    assert late.is_alive()  # the stop did not wait for the launch either
    assert jobs.wait("holder") == EXIT_STOPPED
    late.join(60)
    assert not late.is_alive()
    if not outcome:  # it got the GPUs the holder gave back: clean it up with the others
        jobs.started.append("late")


# A scheduler's Ray driver that reserved all four GPUs for job "orphan", as a killed scheduler leaves its group.
OLD_DRIVER = """
    import sys, time, ray
    from ray.util.placement_group import placement_group
    ray.init(address=sys.argv[1], namespace="pollux", log_to_driver=False)
    group = placement_group([{"pollux_gpu": 2}, {"pollux_gpu": 2}], strategy="SPREAD", name="pollux-orphan")
    group.wait(30)
    print("reserved", flush=True)
    time.sleep(120)
"""


def test_a_dead_schedulers_group_of_the_job_blocks_its_launch_until_ray_removes_it(
    jobs: Jobs, launcher: RayLauncher
) -> None:
    script = jobs.tmp_path / "old_driver.py"
    script.write_text(textwrap.dedent(OLD_DRIVER))
    address = ray.get_runtime_context().gcs_address
    driver = subprocess.Popen([sys.executable, str(script), address], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout.readline() == "reserved\n"
        impatient = RayLauncher(gpu_resource=RESOURCE, stop_grace_s=0.5, placement_timeout_s=3)  # a new scheduler
        started = time.monotonic()
        with pytest.raises(LaunchError, match="previous worker group still holds") as refused:
            impatient.launch(jobs.request("orphan", ("true",), (1, 0)))
        assert refused.value.transient  # the message says whose GPUs they are, not "could not reserve"
        assert time.monotonic() - started >= 0.5  # it gave the old group its grace period
        impatient.shutdown()
        driver.kill()  # the old scheduler dies; Ray removes its group, the launch waits for that
        workers = jobs.start("orphan", ENV_DUMP, (1, 0))
        assert jobs.wait("orphan") == 0 and len(workers) == 1
    finally:
        driver.kill()
        driver.wait()
        driver.stdout.close()


def test_reap_stops_recorded_workers_on_this_host_and_spares_reused_pids(jobs: Jobs) -> None:
    workers = jobs.start("stray", TERM_WAITER, (1, 0))
    wait_for(lambda: (jobs.tmp_path / "ready-0").exists(), 30, "the worker to start")
    reused = WorkerInfo(rank=0, node=0, pid=os.getpid(), host=workers[0].host, start_ticks=1)
    assert jobs.launcher.reap([reused]) == 0
    assert jobs.launcher.reap(workers) == 1
    assert (jobs.tmp_path / "term-0").exists()
    assert jobs.wait("stray") == EXIT_STOPPED


def test_unknown_jobs_raise(launcher: RayLauncher) -> None:
    for call in (launcher.poll, launcher.stop, launcher.kill, launcher.forget, launcher.workers):
        with pytest.raises(UnknownJobError):
            call("nobody")


def test_digits_trains_with_gloo_across_both_nodes(jobs: Jobs) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    report = jobs.tmp_path / "report.json"
    env = {"POLLUX_REPORT_PATH": str(report), "POLLUX_CHECKPOINT_DIR": str(jobs.tmp_path / "ckpt")}
    command = ("python", str(REPO / "examples" / "digits_mlp.py"), "--epochs", "1")
    jobs.launcher.launch(jobs.request("digits", command, (1, 1), env=env, cwd=REPO))
    jobs.started.append("digits")
    code = jobs.wait("digits", timeout_s=120)
    assert code == 0, (jobs.tmp_path / "logs" / "digits.log").read_text()[-3000:]
    result = read_report(report)
    assert (result.status, result.batch.num_replicas, result.batch.num_nodes) == ("finished", 2, 2)

"""Cloud auto-scaling on Ray's own autoscaler: a real local autoscaling Ray cluster of fake nodes (Ray's
`fake_multinode` provider, what `ray.cluster_utils.AutoscalingCluster` drives for Ray's autoscaler tests) with two
node types of different GPU type, `pollux up --backend ray --autoscale`, real example jobs (torch, gloo).

The head is started by this test's own `ray start --head --block` process and stopped by its handle (not by
`AutoscalingCluster.start/shutdown`, whose `ray stop --force` would stop every Ray on the machine); the fake nodes
are started and stopped by Ray's autoscaler, and what is left of them at the end is ended by pid, found by this
cluster's own temporary directory. One such cluster serves this module's test and test_node_loss_ray's (the
`autoscaling_ray` fixture, conftest.py): they run one after the other and the cluster is stopped after the last."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the Ray backend needs ray: make test installs it (pip install -e '.[ray]')")
pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
pytest.importorskip("sklearn", reason="the examples need it: make test installs it (pip install -e '.[examples]')")
import contextlib

import ray
from runtime_jobs import wait_for
from test_cli_local import DIGITS, Up, pollux

from pollux.agent.report import read_report
from pollux.runtime.store import StateStore

pytestmark = pytest.mark.e2e

RESOURCE = "pollux_gpu"
NODE_TYPES = {  # two GPUs per node, told apart by Ray's accelerator-type resource
    "a100-node": {"CPU": 1, RESOURCE: 2, "accelerator_type:A100": 1},
    "rtx-node": {"CPU": 1, RESOURCE: 2, "accelerator_type:RTX": 1},
}

# The GCS declares a killed node dead after 3 failed health checks a second apart (Ray's default: 5, 3 s apart),
# so that a node-loss test takes seconds; a live node answers within milliseconds, the timeout is there for a
# loaded machine.
FAST_NODE_DEATH = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "5000",
    "RAY_health_check_failure_threshold": "3",
}


def autoscaling_config(gcs_address: str) -> dict:
    """A fake-multinode autoscaler config: the head runs no jobs, each worker type up to two nodes, idle ones go
    after 3 s."""
    types = {
        name: {"resources": r, "node_config": {}, "min_workers": 0, "max_workers": 2} for name, r in NODE_TYPES.items()
    }
    types["ray.head.default"] = {"resources": {"CPU": 1}, "node_config": {}, "max_workers": 0}
    provider = {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True}
    provider.update(disable_launch_config_check=True, gcs_address=gcs_address)
    empty: dict = {key: [] for key in ("initialization_commands", "setup_commands", "head_setup_commands")}
    empty.update({key: [] for key in ("worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands")})
    return {
        "cluster_name": "pollux-autoscale-test",
        "max_workers": 4,
        "upscaling_speed": 10.0,
        "idle_timeout_minutes": 0.05,
        "provider": provider,
        "available_node_types": types,
        "head_node_type": "ray.head.default",
        "auth": {"ssh_user": "ray"},
        "docker": {},
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
        **empty,
    }


class AutoscalingRay:
    """The head process, its address and a sampler of the nodes Ray runs (this process connects as a driver)."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        self.address = f"{ray.util.get_node_ip_address()}:{port}"
        self.temp_dir = tempfile.mkdtemp(prefix="plx-as-", dir="/tmp")  # short: Ray's socket paths must fit
        config = Path(self.temp_dir) / "autoscaling.json"
        config.write_text(json.dumps(autoscaling_config(self.address)))
        env = {**os.environ, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1"}
        env.update(FAST_NODE_DEATH)
        command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}"]
        command += [f"--autoscaling-config={config}", "--num-cpus=1", "--include-dashboard=false"]
        command += [f"--temp-dir={self.temp_dir}", "--object-store-memory=80000000"]
        self.log = (Path(self.temp_dir) / "head.log").open("w")
        self.head = subprocess.Popen(
            command, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.started = time.monotonic()  # reset for each test by the `autoscaling_ray` fixture (conftest.py)
        self.spoiled = False  # a test that killed a node sets it: the next test gets a fresh cluster

    def connect(self) -> None:
        def connected() -> bool:
            try:
                ray.init(address=self.address, log_to_driver=False, namespace="test")
                return True
            except (ConnectionError, RuntimeError):
                return False

        wait_for(connected, 60, "the autoscaling Ray head")

    def nodes(self) -> dict[str, int]:
        """Alive GPU nodes per GPU type now, recorded for the printout."""
        counts: dict[str, int] = {}
        for node in ray.nodes():
            if node["Alive"] and node["Resources"].get(RESOURCE):
                kind = next(r.split(":")[1].lower() for r in node["Resources"] if r.startswith("accelerator_type:"))
                counts[kind] = counts.get(kind, 0) + 1
        if not self.samples or self.samples[-1][1] != counts:
            self.samples.append((time.monotonic() - self.started, counts))
        return counts

    def shutdown(self) -> None:
        if ray.is_initialized():
            ray.shutdown()
        self.head.send_signal(signal.SIGTERM)
        try:
            self.head.wait(30)
        except subprocess.TimeoutExpired:
            self.head.kill()
            self.head.wait(10)
        self.log.close()
        listed = subprocess.run(["pgrep", "-f", self.temp_dir], capture_output=True, text=True, check=False)
        for pid in listed.stdout.split():  # fake nodes Ray's autoscaler had not stopped yet: this cluster's only
            if int(pid) != os.getpid():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)


def digits(folder: Path, name: str, epochs: int, extra: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\ncommand = ["python", "{DIGITS}", "--epochs", "{epochs}"]\ninit_batch_size = 32\n'
        f"max_batch_size = 512\nlocal_bsz_bounds = [8, 128]\nmax_gpus = 2\ncheckpoint_interval_s = 2\n{extra}\n"
    )
    return path


def test_jobs_make_pollux_request_nodes_of_the_type_it_prefers_and_release_them(tmp_path, autoscaling_ray):
    cluster = autoscaling_ray
    assert cluster.nodes() == {}  # the head offers no GPUs: every GPU node comes from the autoscaler
    state = tmp_path / "state"
    up = Up(
        state,
        *("--backend", "ray", "--ray-address", cluster.address, "--gpu-resource", RESOURCE, "--autoscale"),
        *("--node-type", "a100:2:0:2", "--node-type", "rtx:2:0:2"),
        *("--interval", "1", "--restart-delay", "1", "--lease", "0", "--stop-grace", "30", "--autoscale-window", "5"),
    )
    store = StateStore(state / "state.db")
    try:
        up.cli("submit", str(digits(tmp_path, "fast", 12, "single_gpu_throughput = {a100 = 300.0, rtx = 100.0}")))
        up.cli("submit", str(digits(tmp_path, "pinned", 4, 'gpu_types = ["rtx"]')))

        def on_their_types() -> bool:
            """`pollux ls` shows both running, fast on a100 (the type the policy prefers for it), pinned on rtx.
            Polled: a job may be moved for a round while the pool follows the nodes that join."""
            cluster.nodes()
            cells = [line.replace("│", " ").split() for line in up.cli("ls").stdout.splitlines()]
            shown = {row[0]: (row[1], row[3]) for row in cells if row[:1] in (["fast"], ["pinned"]) and len(row) > 3}
            return shown == {"fast": ("running", "a100"), "pinned": ("running", "rtx")}

        wait_for(on_their_types, 120, "both jobs to run on the nodes Ray started for their types")

        def all_done() -> bool:
            cluster.nodes()
            return all(job.status == "completed" for job in store.jobs())

        wait_for(all_done, 240, "both jobs to complete")
        wait_for(lambda: cluster.nodes() == {}, 60, "Ray to release every GPU node")
        print("\nnodes Ray ran over time (s since the test started: GPU nodes per type):")
        for at, counts in cluster.samples:
            print(f"  {at:6.1f}  {counts or 'none'}")
        assert max(sum(c.values()) for _, c in cluster.samples) >= 2
        for name, epochs in (("fast", 12), ("pinned", 4)):
            report = read_report(state / "jobs" / name / "report.json")
            assert report.status == "finished" and report.progress.epoch == epochs
            assert report.progress.examples == epochs * report.progress.epoch_size  # every example once per epoch
            # pinned may run on rtx only; fast ran on a100 (and maybe on rtx too while a100 nodes were starting)
            assert (
                ("a100" in report.throughput_samples_by_type)
                if name == "fast"
                else (set(report.throughput_samples_by_type) == {"rtx"})
            )
    finally:
        store.close()
        up.down()


def test_bad_autoscale_input_is_one_line_and_starts_nothing(tmp_path):
    for args, message in [
        (("--backend", "ray", "--autoscale", "--node-type", "a100:2:3:1"), "the maximum 1 is below the minimum 3"),
        (("--autoscale", "--node-type", "a100:2:0:1"), "--autoscale needs the Ray backend"),
        (("--backend", "ray", "--autoscale"), "--autoscale needs the node types"),
        (("--autoscale-window", "5"), "--autoscale-window is for --autoscale"),
    ]:
        result = pollux("up", "--state-dir", str(tmp_path / "state"), *args, check=False, timeout=60)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "state").exists()

"""End to end on the Ray backend: a real two-node Ray cluster on this machine (virtual GPUs as a custom resource),
`pollux up --backend ray` connected to it, three example jobs, one of them spanning both nodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the Ray backend needs ray: make test installs it (pip install -e '.[ray]')")
pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
pytest.importorskip("sklearn", reason="the examples need it: make test installs it (pip install -e '.[examples]')")
from runtime_jobs import wait_for
from test_cli_local import DIGITS, Up, pollux

from pollux.agent.report import read_report
from pollux.runtime.store import StateStore

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

RESOURCE = "pollux_gpu"


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """Head + one worker node, two virtual GPUs each; the scheduler process connects, this process does not."""
    from ray.cluster_utils import Cluster as RayCluster

    node = {"num_cpus": 2, "resources": {RESOURCE: 2}, "object_store_memory": 80 * 1024 * 1024}
    cluster = RayCluster(initialize_head=True, connect=False, head_node_args=node)
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        yield cluster.address
    finally:
        cluster.shutdown()


def digits_spec(folder: Path, name: str, epochs: int, **fields: int) -> Path:
    path = folder / f"{name}.toml"
    extra = "".join(f"{key} = {value}\n" for key, value in fields.items())
    path.write_text(
        f'name = "{name}"\ncommand = ["python", "{DIGITS}", "--epochs", "{epochs}"]\ninit_batch_size = 32\n'
        f"max_batch_size = 512\nlocal_bsz_bounds = [8, 128]\n{extra}"
    )
    return path


def test_three_example_jobs_on_a_two_node_ray_cluster(tmp_path, ray_address):
    state = tmp_path / "state"
    specs = [
        digits_spec(tmp_path, "wide", 20, min_gpus=3, max_gpus=4),  # more GPUs than one node has: spans both
        digits_spec(tmp_path, "narrow-a", 20, max_gpus=2),
        digits_spec(tmp_path, "narrow-b", 20, max_gpus=2),
    ]
    up = Up(
        state,
        *("--backend", "ray", "--ray-address", ray_address, "--gpu-resource", RESOURCE),
        *("--interval", "2", "--restart-delay", "1", "--lease", "0", "--stop-grace", "30"),
    )
    store = StateStore(state / "state.db")
    try:
        assert "2 node(s) x 2 slot(s)" in " ".join(Path(up.log.name).read_text().split())
        for spec in specs:
            up.cli("submit", str(spec))
        wait_for(lambda: all(job.status == "completed" for job in store.jobs()), 400, "the three jobs to complete")
        allocations = {
            job.name: [tuple(e["allocation"]) for e in store.events(job.name) if e["kind"] == "allocation"]
            for job in store.jobs()
        }
        spanning = [name for name, seq in allocations.items() if any(sum(1 for g in a if g) == 2 for a in seq)]
        assert "wide" in spanning, allocations
        for job in store.jobs():
            report = read_report(state / "jobs" / job.name / "report.json")
            assert report.status == "finished" and report.progress.epoch == 20
        wide_nodes = max(e["allocation"] for e in store.events("wide") if e["kind"] == "allocation")
        assert sum(wide_nodes) >= 3
        assert read_report(state / "jobs" / "wide" / "report.json").max_replicas_seen >= 3
        # the exploration bound: a job that never ran starts on 1 GPU, or on its min_gpus (wide: 3 of 4, both nodes)
        first = {name: next(sum(a) for a in seq if a) for name, seq in allocations.items()}
        assert first == {"wide": 3, "narrow-a": 1, "narrow-b": 1}, allocations
        assert "completed" in up.cli("ls").stdout
    finally:
        store.close()
        up.down()


def test_autoscaling_on_a_ray_cluster_without_an_autoscaler_is_one_line_and_starts_nothing(tmp_path, ray_address):
    """This fixture's Ray cluster has no autoscaler (no autoscaling config): `--autoscale` is refused, not hung."""
    state = tmp_path / "state"
    args = ("--backend", "ray", "--ray-address", ray_address, "--gpu-resource", RESOURCE, "--autoscale")
    result = pollux("up", "--state-dir", str(state), *args, "--node-type", "a100:2:0:1", check=False, timeout=120)
    assert result.returncode == 2 and "this Ray cluster runs no autoscaler" in result.stderr, result.stderr
    # one error line (after Ray's own note that it connected), no traceback, no state
    assert [line for line in result.stderr.splitlines() if "error" in line.lower()] == [
        line for line in result.stderr.splitlines() if line.startswith("error: --autoscale")
    ]
    assert "Traceback" not in result.stderr and not (state / "state.db").exists()

"""GPU types in the runtime: a two-type cluster of CPU slots (`--gpu-type a100=2 --gpu-type rtx=2`), real worker
processes (the counter job), the Pollux policy; and the types a spec may name, checked against the cluster's."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_jobs import wait_for
from test_service import Running

from pollux.cluster import Cluster, NodeGroup
from pollux.errors import SpecError
from pollux.runtime.api import job_row
from pollux.runtime.gpu_types import parse_slot_types, type_from_device_name
from pollux.runtime.local import LocalLauncher
from pollux.runtime.ray_launcher import node_gpu_type, pool_cluster, pool_nodes
from pollux.runtime.spec import loads_spec

pytestmark = pytest.mark.e2e

ENV_OF_RANK0 = """
import json, os, pathlib, signal, sys, time
keys = ("POLLUX_GPU_TYPE", "POLLUX_THROUGHPUT_BOOTSTRAP", "POLLUX_LOCAL_BSZ_BOUNDS")
if os.environ["RANK"] == "0":
    pathlib.Path(sys.argv[1]).write_text(json.dumps({k: os.environ.get(k) for k in keys}))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
time.sleep(120)
"""


def spec(folder: Path, name: str, extra: str) -> str:
    (folder / "env.py").write_text(ENV_OF_RANK0)
    command = json.dumps(["python", "env.py", str(folder / f"{name}.json")])
    return f'name = "{name}"\ncommand = {command}\ninit_batch_size = 32\nadaptive = false\n{extra}\n'


@pytest.fixture()
def two_types(tmp_path: Path) -> Iterator[Running]:
    launcher = LocalLauncher(stop_grace_s=5.0, gpu_types=parse_slot_types(["a100=2", "rtx=2"], None))
    service = Running(tmp_path, policy="pollux", launcher=launcher, restart_delay_s=1.0)
    yield service
    service.stop()


def test_each_job_runs_on_the_type_the_policy_prefers_or_the_one_it_allows(two_types, tmp_path):
    service = two_types.service
    assert service.launcher.cluster == Cluster.of_groups([NodeGroup("a100", 1, 2), NodeGroup("rtx", 1, 2)])
    fast = "single_gpu_throughput = {a100 = 300.0, rtx = 100.0}\nlocal_bsz_bounds_by_type = {a100 = [8, 16]}"
    service.submit(loads_spec(spec(tmp_path, "fast", fast), base=tmp_path))
    service.submit(loads_spec(spec(tmp_path, "pinned", 'gpu_types = ["rtx"]'), base=tmp_path))
    for name in ("fast", "pinned"):
        two_types.wait_status(name, "running")
    wait_for(lambda: all((tmp_path / f"{n}.json").exists() for n in ("fast", "pinned")), 60, "both jobs' ranks 0")
    rows = {name: job_row(service, service.store.job(name), service.clock()) for name in ("fast", "pinned")}
    assert (rows["fast"]["gpu_type"], rows["pinned"]["gpu_type"]) == ("a100", "rtx"), rows
    told = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in ("fast", "pinned")}
    assert told["fast"]["POLLUX_GPU_TYPE"] == "a100" and told["fast"]["POLLUX_LOCAL_BSZ_BOUNDS"] == "8,16"
    assert told["pinned"] == {
        "POLLUX_GPU_TYPE": "rtx",
        "POLLUX_THROUGHPUT_BOOTSTRAP": None,
        "POLLUX_LOCAL_BSZ_BOUNDS": None,
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('gpu_types = ["v100"]', "GPU type 'v100' is not in this cluster (its types: a100, rtx)"),
        ("single_gpu_throughput = {h100 = 1.0}", "GPU type 'h100' is not in this cluster (its types: a100, rtx)"),
        ('gpu_types = ["rtx"]\nmin_gpus = 3\nmax_gpus = 4', "exceeds the 2 GPUs this cluster can give one job"),
    ],
)
def test_a_type_restriction_no_node_can_satisfy_is_refused_naming_the_clusters_types(
    two_types, tmp_path, extra, message
):
    with pytest.raises(SpecError, match=re.escape(message)):
        two_types.service.submit(loads_spec(spec(tmp_path, "bad", extra), base=tmp_path))
    assert two_types.service.store.jobs() == []


def test_gpu_types_come_from_the_machines_names():
    assert type_from_device_name("NVIDIA A100-SXM4-40GB") == "a100"
    assert type_from_device_name("Tesla T4") == "t4"
    assert type_from_device_name("NVIDIA GeForce RTX 2080 Ti") == "rtx"
    node = {"NodeID": "n1", "NodeManagerAddress": "10.0.0.1", "Alive": True, "Labels": {}}
    assert node_gpu_type({**node, "Resources": {"GPU": 8, "accelerator_type:A100": 1}}, {}) == "a100"
    assert node_gpu_type({**node, "Labels": {"ray.io/accelerator-type": "H100"}, "Resources": {}}, {}) == "h100"
    assert node_gpu_type({**node, "Resources": {"pollux_gpu": 2, "fast": 1}}, {"fast": "a100"}) == "a100"
    assert node_gpu_type({**node, "Resources": {"pollux_gpu": 2}}, {}) == "gpu"


def test_a_ray_pool_groups_nodes_by_type_and_size():
    def node(node_id: str, gpus: int, kind: str) -> dict:
        resources = {"pollux_gpu": gpus, f"accelerator_type:{kind}": 1}
        return {"NodeID": node_id, "NodeManagerAddress": "ip", "Alive": True, "Resources": resources}

    nodes = pool_nodes(
        [node("c", 2, "T4"), node("a", 4, "A100"), node("b", 2, "T4"), node("z", 0, "T4")], "pollux_gpu", {}
    )
    assert [n.node_id for n in nodes] == ["a", "b", "c"]
    assert pool_cluster(nodes) == Cluster.of_groups([NodeGroup("a100", 1, 4), NodeGroup("t4", 2, 2)])

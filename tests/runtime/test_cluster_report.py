"""What the runtime says about its nodes: their count and size as before on uniform nodes, and each node's size and
GPU type (never a size that only holds for some nodes) where they differ."""

import json
import urllib.request
from types import SimpleNamespace

from pollux.cluster import Cluster, NodeGroup
from pollux.runtime.api import ApiServer
from pollux.runtime.cli import _nodes

MIXED = Cluster.of_groups([NodeGroup("rtx", 1, 8), NodeGroup("quad", 2, 4)])


def health(cluster: Cluster) -> dict:
    service = SimpleNamespace(
        clock=lambda: 0.0,
        config=SimpleNamespace(policy="fifo"),
        launcher=SimpleNamespace(cluster=cluster, name="local"),
        capacity=lambda: cluster,
        rounds=0,
    )
    api = ApiServer(service, "token")
    api.start()
    try:
        request = urllib.request.Request(api.url + "/v1/health", headers={"Authorization": "Bearer token"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
            return json.loads(response.read())
    finally:
        api.close()


def test_the_first_line_names_nodes_and_slots_on_uniform_nodes_and_each_group_otherwise():
    assert _nodes(Cluster(2, 2)) == "2 node(s) x 2 slot(s)"
    assert _nodes(MIXED) == "3 node(s): 1×8 rtx + 2×4 quad slot(s)"


def test_health_reports_each_nodes_gpus_and_type():
    uniform = health(Cluster(2, 4))
    assert (uniform["nodes"], uniform["gpus_per_node"], uniform["node_gpus"]) == (2, 4, [4, 4])
    mixed = health(MIXED)
    assert mixed["gpus_per_node"] is None
    assert mixed["node_gpus"] == [8, 4, 4] and mixed["node_types"] == ["rtx", "quad", "quad"]

"""How the Ray launcher wires a group's ranks (the rest of starting a group needs a Ray cluster:
test_ray_launcher)."""

from __future__ import annotations

from pollux.runtime.ray_start import rank_wiring


def test_ranks_are_wired_in_node_order_then_local_like_torchrun() -> None:
    wiring = rank_wiring((2, 0, 1), [0, 0, 2], "10.0.0.1", 29500, "pollux_gpu")
    assert [(w["rank"], w["local_rank"], w["local_world_size"]) for w in wiring] == [(0, 0, 2), (1, 1, 2), (2, 0, 1)]
    assert {(w["world_size"], w["num_nodes"], w["master_addr"], w["master_port"]) for w in wiring} == {
        (3, 2, "10.0.0.1", 29500)
    }
    assert {w["cuda_visible_devices"] for w in wiring} == {""}  # a virtual GPU: the worker must not grab a real one
    assert {w["cuda_visible_devices"] for w in rank_wiring((1,), [0], "h", 1, "GPU")} == {None}  # Ray's to set

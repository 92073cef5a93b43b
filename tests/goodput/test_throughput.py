"""The throughput model's shape: no sync on one GPU, γ blends sum and max, arrays broadcast."""

import numpy as np
import pytest

from pollux.goodput import ThroughputParams, compute_time, iteration_time, sync_time, throughput

PARAMS = ThroughputParams(alpha_c=0.05, beta_c=0.002, alpha_r=0.03, beta_r=0.004, alpha_n=0.2, beta_n=0.01, gamma=1.0)


def with_gamma(gamma: float) -> ThroughputParams:
    return ThroughputParams.from_array(np.r_[PARAMS.to_array()[:6], gamma])


def test_one_replica_has_no_sync_term():
    assert sync_time(PARAMS, 1, 1) == 0.0
    for gamma in (1.0, 3.0, 10.0):
        t = iteration_time(with_gamma(gamma), 1, 1, 64, 0)
        assert t == pytest.approx(compute_time(PARAMS, 64))


def test_gamma_one_adds_compute_and_sync():
    t_grad, t_sync = compute_time(PARAMS, 64), sync_time(PARAMS, 1, 4)
    assert iteration_time(PARAMS, 1, 4, 64) == pytest.approx(t_grad + t_sync)


def test_large_gamma_approaches_the_slower_of_compute_and_sync():
    t_grad, t_sync = compute_time(PARAMS, 64), sync_time(PARAMS, 2, 8)
    t = iteration_time(with_gamma(10.0), 2, 8, 64)
    assert max(t_grad, t_sync) <= t < 1.1 * max(t_grad, t_sync)
    assert t < t_grad + t_sync


def test_crossing_nodes_uses_the_inter_node_constants():
    assert sync_time(PARAMS, 1, 4) == pytest.approx(0.03 + 0.004 * 2)
    assert sync_time(PARAMS, 2, 4) == pytest.approx(0.2 + 0.01 * 2)
    assert sync_time(PARAMS, 1, 2) == pytest.approx(0.03)


def test_accumulation_repeats_compute_only():
    base = iteration_time(PARAMS, 2, 8, 32, 0)
    assert iteration_time(PARAMS, 2, 8, 32, 3) == pytest.approx(base + 3 * compute_time(PARAMS, 32))


def test_model_broadcasts_over_candidate_arrays():
    nodes = np.array([1, 1, 2, 4])
    replicas = np.array([1, 4, 8, 16])
    local = np.array([[16], [64]])
    t = iteration_time(PARAMS, nodes, replicas, local)
    assert t.shape == (2, 4)
    for i in range(2):
        for j in range(4):
            assert t[i, j] == pytest.approx(iteration_time(PARAMS, nodes[j], replicas[j], local[i, 0]))
    rate = throughput(PARAMS, nodes, replicas, 64)
    np.testing.assert_allclose(rate, replicas * 64 / iteration_time(PARAMS, nodes, replicas, 64))


@pytest.mark.parametrize("field,value", [("alpha_c", -1.0), ("gamma", 0.5), ("beta_n", float("inf"))])
def test_invalid_params_are_refused(field, value):
    values = dict(PARAMS.__dict__, **{field: value})
    with pytest.raises(ValueError, match="ThroughputParams"):
        ThroughputParams(**values)

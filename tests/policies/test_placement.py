"""Shared placement helpers and the fixed-batch rule the simulator imports: exact, greedy as the artifact."""

import math

import numpy as np
import pytest

from pollux.policies.placement import fixed_batch_config, packed_placement, place_consolidated, place_most_free


def artifact_rule(batch, replicas, init_batch, max_batch, max_local):
    """The float formula of the artifact's fixed-batch jobs (per-GPU batch rounded up), written out independently
    for comparison."""
    local = math.ceil(batch / replicas - 1e-8)
    accum = math.ceil(local / max_local - 1e-8) - 1
    if replicas == 1 and batch > init_batch:
        accum = max(1, accum)
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    return min(atomic, int(max_batch / (replicas * (accum + 1)))), accum


@pytest.mark.parametrize(
    ("batch", "replicas", "expected"),
    [
        (2048, 6, (171, 1)),  # local 342 > 256: one accumulation step
        (512, 4, (128, 0)),  # fits per GPU: no accumulation
        (4096, 2, (256, 7)),  # local 2048 = 8 micro-batches of 256
        (256, 1, (128, 1)),  # one GPU, M > M0 = 128: at least one accumulation step though 256 fits
        (128, 1, (128, 0)),  # one GPU, M = M0: no forced accumulation
        (100, 3, (34, 0)),  # ceil, not floor
    ],
)
def test_fixed_batch_config_cases(batch, replicas, expected):
    assert fixed_batch_config(batch, replicas, 128, 4096, (32, 256)) == expected


def test_fixed_batch_config_is_capped_by_the_max_batch():
    # local 334 -> s = 1, m = 167, but 3 GPUs × 167 × 2 = 1002 > 1000: m drops to 1000 // 6 = 166
    assert fixed_batch_config(1000, 3, 128, 1000, (32, 256)) == (166, 1)


def test_fixed_batch_config_matches_the_artifact_formula_on_random_inputs():
    rng = np.random.default_rng(7)
    for _ in range(3000):
        max_local = int(rng.integers(1, 600))
        batch = int(rng.integers(1, 70000))
        replicas = int(rng.integers(1, 65))
        init_batch = int(rng.integers(1, 4096))
        max_batch = int(rng.integers(batch, 2 * batch + 1))
        got = fixed_batch_config(batch, replicas, init_batch, max_batch, (1, max_local))
        assert got == artifact_rule(batch, replicas, init_batch, max_batch, max_local)
        local_bsz, accum = got
        assert replicas * local_bsz * (accum + 1) <= max_batch


def test_fixed_batch_config_rejects_no_gpus():
    with pytest.raises(ValueError, match="num_replicas"):
        fixed_batch_config(128, 0, 128, 4096, (32, 256))


def test_packed_placement_fills_whole_nodes_first():
    assert packed_placement(10, 4) == (4, 4, 2)
    assert packed_placement(8, 4) == (4, 4)
    assert packed_placement(3, 4) == (3,)


def test_greedy_takes_the_most_free_node_first_and_breaks_ties_by_index():
    assert place_most_free([1, 3, 3, 0], 4) == (0, 3, 1, 0)
    assert place_most_free([2, 2, 2], 2) == (2, 0, 0)
    assert place_most_free([1, 1], 3) is None


def test_consolidated_uses_the_fewest_nodes_or_waits():
    assert place_consolidated([4, 2, 3], 2, 4) == (0, 2, 0)  # best fit keeps the empty node whole
    assert place_consolidated([3, 3, 4, 4], 6, 4) == (0, 0, 4, 2)
    assert place_consolidated([3, 3, 0, 0], 6, 4) == (3, 3, 0, 0)  # 2 nodes either way
    assert place_consolidated([2, 2, 2, 2], 6, 4) is None  # would need 3 nodes
    assert place_consolidated([1, 1], 2, 4) is None

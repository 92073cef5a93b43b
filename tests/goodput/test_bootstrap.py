"""The model of a GPU type a job has not run on, bootstrapped from one it has (docs/design.md, "Heterogeneous
clusters")."""

import numpy as np
import pytest

from pollux.goodput import GoodputFunction, GradientStats, ThroughputParams, scaled_params, throughput

PARAMS = ThroughputParams(0.05, 0.002, 0.01, 0.003, 0.04, 0.02, 1.6)


@pytest.mark.parametrize("ratio", [0.3, 1.0, 2.5, 7.0])
def test_every_configuration_is_predicted_exactly_ratio_times_as_fast(ratio):
    rng = np.random.default_rng(3)
    nodes = rng.integers(1, 5, 200)
    replicas = nodes * rng.integers(1, 9, 200)
    local = rng.integers(1, 256, 200)
    accum = rng.integers(0, 4, 200)
    known = throughput(PARAMS, nodes, replicas, local, accum)
    guessed = throughput(scaled_params(PARAMS, ratio), nodes, replicas, local, accum)
    np.testing.assert_allclose(guessed / known, ratio, rtol=1e-12)


def test_the_bootstrap_never_predicts_more_goodput_than_the_ratio_allows_with_the_same_bounds():
    stats = GradientStats(sqr=1.0, var=40.0)
    known = GoodputFunction(PARAMS, stats, 64)
    guessed = GoodputFunction(scaled_params(PARAMS, 1.7), stats, 64)
    replicas = np.arange(1, 33)
    best_known = known.optimize(2, replicas, 4096, (8, 128), accumulation=True).goodput
    best_guessed = guessed.optimize(2, replicas, 4096, (8, 128), accumulation=True).goodput
    assert np.all(best_guessed <= 1.7 * best_known * (1 + 1e-9))
    assert np.all(best_guessed >= 1.7 * best_known * (1 - 1e-9))  # same bounds, same batch: exactly the ratio


@pytest.mark.parametrize("ratio", [0.0, -1.0, float("nan"), float("inf")])
def test_a_ratio_that_is_not_a_positive_number_is_refused(ratio):
    with pytest.raises(ValueError, match="speed_ratio"):
        scaled_params(PARAMS, ratio)

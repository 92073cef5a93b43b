"""The batch-size decision every adaptive job runs, agent and simulated job alike (`pollux.goodput.batch`)."""

import pytest

from pollux.goodput import (
    BatchConfig,
    BatchLimits,
    GradientStats,
    ThroughputParams,
    decide_batch,
    initial_config,
)

LIMITS = BatchLimits(init_batch_size=32, max_batch_size=1024, local_bsz_bounds=(8, 64), accumulation=True)
PARAMS = ThroughputParams(alpha_c=0.01, beta_c=0.0005, alpha_r=0.004, beta_r=0.0, alpha_n=0.01, beta_n=0.0, gamma=1.0)


def test_before_measurements_the_batch_is_m0_or_the_smallest_per_replica_batch():
    assert initial_config(LIMITS, 1) == BatchConfig(32, 0)
    assert initial_config(LIMITS, 8) == BatchConfig(8, 0)  # 8 replicas × min 8 > M0
    big_m0 = BatchLimits(256, 1024, (8, 64), accumulation=True)
    assert initial_config(big_m0, 2) == BatchConfig(64, 1)  # 128 per replica = 2 × 64
    assert initial_config(BatchLimits(256, 1024, (8, 64), accumulation=False), 2) == BatchConfig(64, 0)


def test_the_per_replica_batch_rounds_up_so_a_step_trains_at_least_m0():
    limits = BatchLimits(128, 4096, (4, 32))
    assert initial_config(limits, 3) == BatchConfig(22, 1)  # 43 per replica in 2 micro-batches: 3·22·2 = 132
    assert initial_config(BatchLimits(128, 128, (4, 32)), 3) == BatchConfig(21, 1)  # but never past the max batch


def test_the_max_batch_and_the_memory_bound_win_over_the_smallest_per_replica_batch():
    assert initial_config(BatchLimits(32, 64, (8, 64)), 16) == BatchConfig(4, 0)  # 16 × 8 > 64
    assert initial_config(BatchLimits(512, 1024, (8, 64), accumulation=False), 2) == BatchConfig(64, 0)


def test_without_timings_or_gradient_statistics_the_initial_batch_is_kept():
    assert decide_batch(LIMITS, None, GradientStats(1.0, 1.0), 1, 2).config == initial_config(LIMITS, 2)
    assert decide_batch(LIMITS, PARAMS, None, 1, 2).config == initial_config(LIMITS, 2)
    assert decide_batch(LIMITS, PARAMS, None, 1, 2).goodput == 0.0


def test_where_no_configuration_fits_the_bounds_the_initial_batch_is_the_fallback():
    limits = BatchLimits(128, 128, (32, 32))  # 3 replicas: 43 each, or 2 micro-batches of 22 < 32
    decision = decide_batch(limits, PARAMS, GradientStats(1.0, 1.0), 1, 3)
    assert decision == decide_batch(limits, None, None, 1, 3)
    assert decision.goodput == 0.0


def test_a_decision_is_within_the_bounds_and_predicts_its_goodput():
    decision = decide_batch(LIMITS, PARAMS, GradientStats(1e-6, 1.0), 1, 2)
    assert 8 <= decision.config.local_bsz <= 64
    assert 32 <= decision.config.total(2) <= 1024
    assert decision.goodput > 0


@pytest.mark.parametrize(
    "m0,largest,bounds,match",
    [(32, 16, (8, 64), "max_batch_size=16 must be >= init_batch_size=32"), (32, 64, (0, 64), "local_bsz_bounds")],
)
def test_limits_are_validated_with_a_message_that_says_what_to_fix(m0, largest, bounds, match):
    with pytest.raises(ValueError, match=match):
        BatchLimits(m0, largest, bounds)

"""Batch-size decisions and the measurement history they rest on (torch-free parts of the agent, but for the
loader's check of its limits)."""

import pytest

from pollux.agent.adapt import BATCH_EXPLORATION_FACTOR, explored_limits, refit
from pollux.agent.sampler import MicroBatch
from pollux.agent.steps import StepTracker
from pollux.errors import AgentError
from pollux.goodput import BatchLimits, GradientStats, ThroughputLog, decide_batch, initial_config

LIMITS = BatchLimits(init_batch_size=32, max_batch_size=1024, local_bsz_bounds=(8, 64), accumulation=True)


def synthetic_log(alpha=0.01, beta=0.0005, sync=0.004):
    """Steps of a job whose compute is alpha + beta·m and whose all-reduce adds `sync` on 2 replicas."""
    log = ThroughputLog()
    for replicas in (1, 2):
        for local in (16, 32, 64):
            compute = alpha + beta * local
            log.record(1, replicas, local, 0, compute, compute + (sync if replicas > 1 else 0.0))
    return log


def test_without_timings_or_gradient_statistics_the_initial_batch_is_kept():
    assert refit(ThroughputLog()) is None
    assert decide_batch(LIMITS, None, GradientStats(1.0, 1.0), 1, 2).config == initial_config(LIMITS, 2)
    assert decide_batch(LIMITS, refit(synthetic_log()), None, 1, 2).config == initial_config(LIMITS, 2)


def total(decision, replicas=2):
    return decision.config.total(replicas)


def test_the_chosen_batch_grows_with_the_noise_scale():
    params = refit(synthetic_log())
    totals = [total(decide_batch(LIMITS, params, GradientStats(1.0, phi / 32), 1, 2)) for phi in (4, 64, 512, 8192)]
    assert totals == sorted(totals)
    assert totals[0] == 32 and totals[-1] > 8 * 32


def test_choices_respect_the_bounds_and_use_accumulation_beyond_the_per_replica_maximum():
    decision = decide_batch(LIMITS, refit(synthetic_log()), GradientStats(1e-6, 1.0), 1, 2)
    assert 8 <= decision.config.local_bsz <= 64
    assert total(decision) <= 1024
    assert decision.config.accum_steps > 0


def test_a_refit_warm_started_from_the_previous_fit_agrees_with_a_cold_one():
    log = synthetic_log()
    cold = refit(log)
    log.record(1, 2, 48, 0, 0.01 + 0.0005 * 48, 0.01 + 0.0005 * 48 + 0.004)
    warm, fresh = refit(log, previous=cold), refit(log)
    assert warm.beta_c == pytest.approx(fresh.beta_c, rel=0.05)
    assert warm.alpha_c == pytest.approx(fresh.alpha_c, rel=0.05)


def test_the_loader_refuses_bad_limits_with_a_message_that_says_what_to_fix():
    import torch

    import pollux.agent as pa

    agent = pa.init_process_group("gloo")
    try:
        loader = pa.AdaptiveDataLoader(torch.utils.data.TensorDataset(torch.zeros(64, 1)), batch_size=32)
        with pytest.raises(AgentError, match="autoscale_batch_size: max_batch_size=16 must be >= init_batch_size=32"):
            loader.autoscale_batch_size(16, (8, 64))
        with pytest.raises(AgentError, match="autoscale_batch_size: local_bsz_bounds"):
            loader.autoscale_batch_size(64, (0, 64))
    finally:
        agent.close()


def test_the_throughput_log_keeps_medians_per_configuration_and_survives_a_restart():
    log = ThroughputLog(window=3)
    for compute, step in [(1.0, 2.0), (1.2, 2.2), (9.0, 9.0), (1.1, 2.1)]:  # the 1.0 falls out of the window
        log.record(1, 2, 16, 0, compute, step)
    log.record(1, 3, 8, 1, 0.5, 1.5)
    restored = ThroughputLog()
    restored.load_state_dict(log.state_dict())
    samples = restored.samples()
    assert len(samples) == 2 and restored.max_replicas == 3 and restored.steps_recorded() == 5
    assert samples.compute_time.tolist() == [1.2, 0.5]
    assert samples.step_time.tolist() == [2.2, 1.5]
    assert samples.accum_steps.tolist() == [0, 1]


def test_step_timing_splits_compute_from_unhidden_sync():
    tracker = StepTracker()
    tracker.begin_micro(MicroBatch(0, 8, 0, False, True), now=0.0)
    assert tracker.end_micro(0.010, distributed=True) is None  # accumulation micro-step: all compute
    tracker.begin_micro(MicroBatch(8, 16, 1, True, True), now=0.010)
    tracker.last_grad_t = 0.018  # the backward pass produced its last local gradient: compute ends here
    timing = tracker.end_micro(0.025, distributed=True)
    assert timing.compute_s == pytest.approx((0.010 + 0.008) / 2)
    assert timing.step_s == pytest.approx(0.025)
    assert (timing.micro_steps, timing.full) == (2, True)
    assert tracker.step_examples == 16


def test_the_batch_grows_at_most_twice_what_a_replica_has_measured_per_decision():
    """A fit whose per-example cost is all but zero wants the largest batch; the job goes there by doublings, each
    measured before the next (the low-noise adaptation test jumped 34 -> 512 on such a fit)."""
    free = refit(synthetic_log(beta=1e-9))
    log = ThroughputLog()
    log.record(1, 2, 16, 0, 0.01, 0.012)
    log.record(1, 2, 12, 1, 0.01, 0.024)  # 24 examples per replica per step, in two micro-batches
    limits = explored_limits(LIMITS, log.max_replica_batch, 2)
    assert log.max_replica_batch == 24 and limits.max_batch_size == BATCH_EXPLORATION_FACTOR * 24 * 2
    assert total(decide_batch(LIMITS, free, GradientStats(1.0, 1.0), 1, 2)) == 128  # 64 per replica, its memory's
    assert total(decide_batch(limits, free, GradientStats(1.0, 1.0), 1, 2)) <= 96
    assert explored_limits(LIMITS, 0, 2) == LIMITS  # nothing measured: nothing to extrapolate from
    assert explored_limits(LIMITS, 4, 2).max_batch_size == LIMITS.init_batch_size  # never below M0
    assert explored_limits(LIMITS, 512, 2) == LIMITS

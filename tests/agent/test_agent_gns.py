"""The two-batch-size estimators of McCandlish et al. (2018): unbiased, smoothed, and at M0 scale for goodput."""

import numpy as np
import pytest

from pollux.agent.gns import NoiseScaleEstimator, two_batch_estimates
from pollux.goodput import efficiency, noise_scale


def test_two_batch_estimates_are_unbiased_for_gaussian_gradient_noise():
    rng = np.random.default_rng(0)
    dim, true_sqr, trace = 50, 2.0, 400.0
    g = np.full(dim, np.sqrt(true_sqr / dim))
    small, big, draws = 8, 64, 20_000
    noise_small = rng.standard_normal((draws, dim)) * np.sqrt(trace / dim / small)
    noise_big = rng.standard_normal((draws, dim)) * np.sqrt(trace / dim / big)
    sqr_small = ((g + noise_small) ** 2).sum(axis=1)
    sqr_big = ((g + noise_big) ** 2).sum(axis=1)
    est_sqr, est_trace = two_batch_estimates(sqr_small.mean(), small, sqr_big.mean(), big)
    assert est_sqr == pytest.approx(true_sqr, rel=0.05)
    assert est_trace == pytest.approx(trace, rel=0.02)


def test_noiseless_measurements_give_the_exact_moments():
    # E|G_B|² = |g|² + tr/B with |g|² = 3, tr = 96
    sqr, trace = two_batch_estimates(3 + 96 / 16, 16, 3 + 96 / 64, 64)
    assert (sqr, trace) == pytest.approx((3.0, 96.0))


def test_grad_stats_are_at_m0_scale_so_noise_scale_is_trace_over_sqr():
    est = NoiseScaleEstimator(smoothing=0.9)
    assert est.grad_stats(32) is None
    for _ in range(5):
        est.update(3 + 96 / 16, 16, 3 + 96 / 64, 64, init_batch_size=32)
    stats = est.grad_stats(32)
    assert stats.sqr == pytest.approx(3.0)
    assert stats.var == pytest.approx(96 / 32)  # variance of an M0-batch gradient
    assert noise_scale(stats, 32) == pytest.approx(32.0)  # φ = tr(Σ)/|g|²
    assert efficiency(stats, 32, 64) == pytest.approx((32 + 32) / (32 + 64))


def test_the_moving_average_is_bias_corrected_and_tracks_changes():
    est = NoiseScaleEstimator(smoothing=0.5)
    est.update(3 + 96 / 16, 16, 3 + 96 / 64, 64, 64)
    assert est.sqr == pytest.approx(3.0)  # one update: no pull towards the zero start
    for _ in range(60):
        est.update(1 + 8 / 16, 16, 1 + 8 / 64, 64, 64)
    assert (est.sqr, est.trace) == pytest.approx((1.0, 8.0))


def test_state_round_trips():
    est = NoiseScaleEstimator()
    est.update(5.0, 8, 2.0, 16, 8)
    again = NoiseScaleEstimator()
    again.load_state_dict(est.state_dict())
    assert (again.sqr, again.trace, again.updates) == (est.sqr, est.trace, est.updates)


def test_estimates_need_two_distinct_batch_sizes():
    with pytest.raises(ValueError):
        two_batch_estimates(1.0, 16, 1.0, 16)


def test_batches_drawn_without_replacement_use_the_finite_population_variance():
    # E|G_B|² = |g|² + tr(Σ)/B·(N−B)/(N−1) for batches drawn without replacement from N examples
    n, sqr, trace = 1500, 1e-2, 15.0

    def expected(bsz):
        return sqr + trace / bsz * (n - bsz) / (n - 1)

    assert two_batch_estimates(expected(128), 128, expected(512), 512, num_examples=n) == pytest.approx((sqr, trace))


def test_a_small_dataset_whose_noise_scale_reaches_its_size_is_measured_without_bias():
    # A finite population of N per-example gradients with φ = tr(Σ)/|g|² = N, sampled as an epoch's permutation is:
    # ignoring that the batches share no example puts |g|² at |g|² − tr(Σ)/N = 0 and φ at infinity.
    rng = np.random.default_rng(0)
    n, dim, small, big, draws = 400, 8, 8, 32, 50_000
    xi = rng.standard_normal((n, dim))
    xi -= xi.mean(axis=0)
    trace = float((xi**2).sum(axis=1).mean())
    g = np.full(dim, np.sqrt(trace / n / dim))  # |g|² = tr(Σ)/N
    batches = np.stack([g + xi[rng.permutation(n)[:big]] for _ in range(draws)])  # (draws, big, dim)
    sqr_small = (batches.reshape(draws, big // small, small, dim).mean(axis=2) ** 2).sum(axis=2).mean()
    sqr_big = (batches.mean(axis=1) ** 2).sum(axis=1).mean()
    est = NoiseScaleEstimator()
    est.update(sqr_small, small, sqr_big, big, init_batch_size=small, num_examples=n)
    assert noise_scale(est.grad_stats(small), small) == pytest.approx(n, rel=0.1)
    naive_sqr, _ = two_batch_estimates(sqr_small, small, sqr_big, big)
    assert abs(naive_sqr) < 0.2 * trace / n

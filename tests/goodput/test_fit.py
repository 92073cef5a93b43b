"""`fit_throughput` recovers known parameters and applies its priors where the data is silent."""

import numpy as np
import pytest

from pollux.goodput import ThroughputParams, ThroughputSamples, compute_time, fit_throughput, iteration_time
from pollux.goodput.fit import NOISY_BSZ_SPREAD

TRUE = ThroughputParams(alpha_c=0.04, beta_c=0.003, alpha_r=0.05, beta_r=0.006, alpha_n=0.25, beta_n=0.02, gamma=1.6)


def synthetic(rng: np.random.Generator, nodes, replicas, local, accum=0, noise=0.05) -> ThroughputSamples:
    nodes, replicas, local, accum = np.broadcast_arrays(nodes, replicas, local, accum)
    t_grad = compute_time(TRUE, local) * np.exp(rng.normal(0, noise, local.shape))
    t_step = iteration_time(TRUE, nodes, replicas, local, accum) * np.exp(rng.normal(0, noise, local.shape))
    return ThroughputSamples.from_arrays(nodes, replicas, local, t_grad, t_step, accum)


def full_grid(rng: np.random.Generator, noise: float = 0.05) -> ThroughputSamples:
    alloc = [(1, 1), (1, 2), (1, 3), (1, 4), (2, 2), (2, 4), (2, 8), (3, 12), (4, 16), (8, 32)]
    local = [8, 16, 32, 64, 128, 256]
    rows = [(n, k, m) for n, k in alloc for m in local]
    n, k, m = (np.array(c) for c in zip(*rows, strict=True))
    return synthetic(rng, np.repeat(n, 3), np.repeat(k, 3), np.repeat(m, 3), noise=noise)


def test_fit_recovers_known_parameters_from_noisy_samples():
    rng = np.random.default_rng(7)
    fitted = fit_throughput(full_grid(rng, noise=0.05))
    for name in ("alpha_c", "beta_c", "alpha_r", "alpha_n", "beta_n"):
        assert getattr(fitted, name) == pytest.approx(getattr(TRUE, name), rel=0.15), name
    assert fitted.beta_r == pytest.approx(TRUE.beta_r, rel=0.5)
    assert fitted.gamma == pytest.approx(TRUE.gamma, rel=0.15)
    # Predictions, which is what the scheduler uses, are much tighter than single parameters.
    probe = full_grid(np.random.default_rng(8), noise=0.0)
    pred = iteration_time(fitted, probe.num_nodes, probe.num_replicas, probe.local_bsz)
    np.testing.assert_allclose(pred, probe.step_time, rtol=0.05)


def test_without_multi_node_samples_crossing_nodes_is_never_cheaper():
    rng = np.random.default_rng(1)
    samples = synthetic(rng, 1, np.array([1, 2, 3, 4] * 4), np.repeat([16, 32, 64, 128], 4))
    fitted = fit_throughput(samples)
    assert fitted.alpha_n == pytest.approx(1.1 * fitted.alpha_r)
    assert fitted.beta_n == pytest.approx(1.1 * fitted.beta_r)


def test_with_one_local_batch_size_alpha_c_is_half_the_mean_compute_time():
    rng = np.random.default_rng(2)
    samples = synthetic(rng, 1, np.array([1, 1, 2, 2]), 64)
    fitted = fit_throughput(samples)
    assert fitted.alpha_c == pytest.approx(0.5 * np.mean(samples.compute_time), rel=1e-6)


def test_between_close_local_batch_sizes_the_per_example_cost_keeps_the_one_size_prior():
    """Measured: 16 and 17 examples per GPU, the larger one a little faster (noise). Fitted free, β_c falls to the
    floor and an agent takes the per-example cost for free, jumping to its largest batch (a flaky agent test)."""
    local = np.repeat([16, 17], 6)
    t_grad = np.where(local == 16, 0.0100, 0.0099) * np.exp(np.random.default_rng(4).normal(0, 0.01, local.shape))
    samples = ThroughputSamples.from_arrays(1, 2, local, t_grad, t_grad + 0.002)
    fitted = fit_throughput(samples, min_bsz_spread=NOISY_BSZ_SPREAD)
    assert fitted.alpha_c == pytest.approx(0.5 * np.mean(samples.compute_time), rel=1e-6)
    assert fitted.beta_c == pytest.approx(0.5 * np.mean(samples.compute_time) / 16.5, rel=0.2)
    spread = ThroughputSamples.from_arrays(1, 2, np.repeat([16, 24], 6), t_grad, t_grad + 0.002)
    assert fit_throughput(spread, min_bsz_spread=NOISY_BSZ_SPREAD).alpha_c != pytest.approx(
        0.5 * np.mean(spread.compute_time), rel=1e-3
    )
    assert fit_throughput(samples).beta_c < 1e-6  # exact times (a profile's): any two sizes count


def test_with_at_most_two_replicas_the_per_replica_sync_terms_stay_at_the_floor():
    rng = np.random.default_rng(3)
    samples = synthetic(rng, np.array([1, 1, 2] * 3), np.array([1, 2, 2] * 3), np.repeat([16, 64, 256], 3))
    fitted = fit_throughput(samples)
    assert fitted.beta_r < 1e-6 and fitted.beta_n < 1e-6
    assert fitted.alpha_n > fitted.alpha_r  # both measured: inter-node sync is dearer in TRUE


def test_single_gpu_samples_assume_sync_free_until_measured():
    rng = np.random.default_rng(4)
    fitted = fit_throughput(synthetic(rng, 1, 1, np.array([8, 16, 32, 64])))
    assert fitted.alpha_r < 1e-6 and fitted.alpha_n < 1e-6


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_nodes": 0},
        {"num_nodes": 3, "num_replicas": 2},
        {"local_bsz": 0},
        {"step_time": -1.0},
        {"compute_time": float("nan")},
    ],
)
def test_impossible_samples_are_refused(kwargs):
    columns = {"num_nodes": 1, "num_replicas": 2, "local_bsz": 32, "compute_time": 0.1, "step_time": 0.2}
    columns.update(kwargs)
    with pytest.raises(ValueError, match="ThroughputSamples"):
        ThroughputSamples.from_arrays(**columns)


def test_a_warm_start_moves_parameters_the_previous_fit_held_at_the_floor():
    """After one GPU only, sync is pinned free; refitting from that fit once sync is measured must find it."""
    rng = np.random.default_rng(5)
    first = fit_throughput(synthetic(rng, 1, 1, np.array([16, 32, 64])))
    samples = full_grid(rng)
    warm, cold = fit_throughput(samples, initial=first), fit_throughput(samples)
    probe = full_grid(np.random.default_rng(6), noise=0.0)
    args = (probe.num_nodes, probe.num_replicas, probe.local_bsz)
    np.testing.assert_allclose(iteration_time(warm, *args), iteration_time(cold, *args), rtol=0.02)
    assert warm.alpha_r == pytest.approx(TRUE.alpha_r, rel=0.15)


def test_without_single_node_sync_samples_intra_node_sync_stays_free():
    """Only one GPU or several nodes measured: nothing says what sync inside one node costs (the artifact's prior)."""
    rng = np.random.default_rng(6)
    samples = synthetic(rng, np.array([1, 2, 2, 4] * 2), np.array([1, 4, 8, 16] * 2), np.repeat([32, 64], 4))
    fitted = fit_throughput(samples)
    assert fitted.alpha_r < 1e-6 and fitted.beta_r < 1e-6
    assert fitted.alpha_n == pytest.approx(TRUE.alpha_n, rel=0.3)

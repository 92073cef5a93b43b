"""Statistical efficiency follows (φ + M0)/(φ + M)."""

import numpy as np
import pytest

from pollux.goodput import GradientStats, adascale_gain, efficiency, noise_scale


def test_efficiency_is_one_at_the_initial_batch_size():
    stats = GradientStats(sqr=2.0, var=3.0)
    assert efficiency(stats, 128, 128) == pytest.approx(1.0)


def test_efficiency_falls_as_the_batch_grows_for_a_fixed_noise_scale():
    stats = GradientStats(sqr=1.0, var=4.0)
    values = efficiency(stats, 64, np.array([64, 128, 256, 1024, 8192]))
    assert np.all(np.diff(values) < 0)
    assert np.all(values > 0)


def test_efficiency_matches_the_noise_scale_formula():
    stats = GradientStats(sqr=0.5, var=2.0)
    m0, batch = 32, np.array([32.0, 100.0, 1000.0])
    phi = noise_scale(stats, m0)
    assert phi == pytest.approx(m0 * 2.0 / 0.5)
    np.testing.assert_allclose(efficiency(stats, m0, batch), (phi + m0) / (phi + batch))


def test_larger_noise_scale_means_larger_batches_stay_efficient():
    low, high = GradientStats(sqr=1.0, var=1.0), GradientStats(sqr=1.0, var=100.0)
    assert efficiency(high, 32, 1024) > efficiency(low, 32, 1024)


def test_adascale_gain_is_between_one_and_the_scale():
    stats = GradientStats(sqr=1.0, var=10.0)
    scale = np.array([1.0, 2.0, 8.0, 64.0])
    gain = adascale_gain(stats, 16, 16 * scale)
    assert np.all(gain >= 1.0 - 1e-12)
    assert np.all(gain <= scale + 1e-12)
    np.testing.assert_allclose(gain / scale, efficiency(stats, 16, 16 * scale))


def test_adascale_gain_is_one_definition_for_scalars_and_arrays():
    stats = GradientStats(sqr=1.0, var=10.0)
    gains = adascale_gain(stats, 16, np.array([16.0, 48.0, 1024.0]))
    scalars = [adascale_gain(stats, 16, batch) for batch in (16, 48, 1024)]
    assert all(type(g) is float for g in scalars)  # no numpy round trip where the simulator asks for one number
    assert scalars == gains.tolist()
    assert adascale_gain(GradientStats(0.0, 0.0), 16, 64) == 1.0  # nothing measured: no gain
    assert adascale_gain(GradientStats(0.0, 0.0), 16, np.array([16, 64])).tolist() == [1.0, 1.0]


def test_pure_noise_gradient_scales_perfectly():
    stats = GradientStats(sqr=0.0, var=1.0)
    assert noise_scale(stats, 8) == float("inf")
    assert efficiency(stats, 8, 800) == pytest.approx(1.0)


@pytest.mark.parametrize("sqr,var", [(-1.0, 1.0), (1.0, -0.1), (float("nan"), 1.0)])
def test_invalid_gradient_stats_are_refused(sqr, var):
    with pytest.raises(ValueError, match="GradientStats"):
        GradientStats(sqr=sqr, var=var)

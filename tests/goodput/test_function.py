"""Goodput and batch-size choice: bounds always hold, the choice follows the noise scale."""

import numpy as np
import pytest

from pollux.goodput import GoodputFunction, GradientStats, ThroughputParams
from pollux.goodput.function import count_grid

PARAMS = ThroughputParams(
    alpha_c=0.02, beta_c=0.0008, alpha_r=0.03, beta_r=0.003, alpha_n=0.12, beta_n=0.003, gamma=2.0
)


def job(var: float = 5.0, m0: int = 128) -> GoodputFunction:
    return GoodputFunction(PARAMS, GradientStats(sqr=1.0, var=var), m0)


def allocations(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    replicas = rng.integers(1, 65, count)
    nodes = np.minimum(replicas, rng.integers(1, 17, count))
    return nodes, replicas


@pytest.mark.parametrize("accumulation", [False, True])
def test_optimize_never_leaves_the_batch_bounds(accumulation):
    rng = np.random.default_rng(0)
    nodes, replicas = allocations(rng, 2000)
    choice = job().optimize(nodes, replicas, 4096, (32, 256), accumulation=accumulation)
    used = choice.goodput > 0
    assert used.mean() > 0.5
    total = replicas * choice.local_bsz * (choice.accum_steps + 1)
    assert np.all(total[used] <= 4096)
    assert np.all((choice.local_bsz[used] >= 32) & (choice.local_bsz[used] <= 256))
    if not accumulation:
        assert np.all(choice.accum_steps == 0)


def test_optimize_returns_no_goodput_where_nothing_fits():
    choice = job().optimize(np.array([1, 4]), np.array([0, 64]), 1024, (32, 256))
    assert choice.goodput.tolist() == [0.0, 0.0]  # no GPUs; 64 GPUs × 32 > 1024


def test_optimize_matches_a_brute_force_search():
    fn = job(var=20.0)
    choice = fn.optimize(2, 8, 4096, (16, 512), accumulation=True)
    best = max(float(fn.goodput(2, 8, m, s)) for m in range(16, 513) for s in range(0, 8) if 8 * m * (s + 1) <= 4096)
    assert float(choice.goodput) >= 0.97 * best
    assert float(choice.goodput) <= best + 1e-9


def test_batch_size_grows_when_the_noise_scale_grows():
    small = job(var=1.0).optimize(1, 8, 8192, (16, 1024), accumulation=True)
    large = job(var=200.0).optimize(1, 8, 8192, (16, 1024), accumulation=True)
    total = lambda c: 8 * c.local_bsz * (c.accum_steps + 1)  # noqa: E731
    assert total(large) > total(small)


def test_optimize_keeps_the_input_shape():
    choice = job().optimize(np.ones((3, 4), dtype=int), np.arange(1, 13).reshape(3, 4), 4096, (16, 512))
    assert choice.goodput.shape == choice.local_bsz.shape == choice.accum_steps.shape == (3, 4)


def test_optimize_fills_the_per_gpu_batch_when_a_step_has_a_large_fixed_cost():
    """yolov3-like bounds (4–8 examples per GPU, M0 = 8): with most of a step's time fixed, a fuller GPU is nearly
    free throughput, so the choice runs every GPU at its maximum, whatever the replica count."""
    params = ThroughputParams(alpha_c=0.3, beta_c=0.005, alpha_r=0.05, beta_r=0.0, alpha_n=0.1, beta_n=0.0, gamma=1.0)
    fn = GoodputFunction(params, GradientStats(sqr=1.0, var=50.0), 8)
    replicas = np.arange(1, 33)
    choice = fn.optimize(1 + (replicas > 4), replicas, 512, (4, 8), accumulation=True)
    assert np.all(choice.local_bsz == 8)
    assert np.all(replicas * 8 * (choice.accum_steps + 1) <= 512)


@pytest.mark.parametrize("accumulation", [False, True])
def test_best_by_count_gives_optimize_s_numbers_exactly(accumulation):
    """The policies' per-count table shares T_grad and the efficiency between its two rows; it must not change a
    single value `optimize` gives on the same grid, for any model (γ at 1, between, and large)."""
    rng = np.random.default_rng(7)
    for gamma in (1.0, 1.37, 2.0, 9.5):
        times = rng.uniform(0.0005, 0.2, 6)
        fn = GoodputFunction(ThroughputParams(*times, gamma=gamma), GradientStats(1.0, rng.uniform(0, 50)), 64)
        max_gpus = int(rng.integers(1, 65))
        bounds = (int(rng.integers(1, 32)), int(rng.integers(32, 512)))
        table = fn.best_by_count(max_gpus, 8192, bounds, accumulation)
        grid = fn.optimize(np.array([[1], [2]]), np.arange(max_gpus + 1)[None, :], 8192, bounds, accumulation)
        assert table.shape == (2, max_gpus + 1)
        np.testing.assert_array_equal(table, grid.goodput)
        assert table[:, 0].tolist() == [0.0, 0.0] and np.all(table[:, 1:] > 0)


def test_best_by_count_limited_on_one_node_gives_the_same_numbers_where_it_computes_them():
    """`one_node_gpus` spares row 0 past what one node holds: every number it does compute is the full table's (the
    candidates kept from call to call included), the rest is 0, and the kept candidates cannot be written into."""
    fn = GoodputFunction(ThroughputParams(0.01, 0.002, 0.03, 0.004, 0.2, 0.01, 1.6), GradientStats(1.0, 20.0), 64)
    full = fn.best_by_count(40, 4096, (8, 256), accumulation=True)
    limited = fn.best_by_count(40, 4096, (8, 256), accumulation=True, one_node_gpus=12)
    np.testing.assert_array_equal(limited[1], full[1])
    np.testing.assert_array_equal(limited[0, :13], full[0, :13])
    assert np.all(limited[0, 13:] == 0) and np.all(full[0, 13:] > 0)
    grid = count_grid(40, 64, 4096, (8, 256), True)
    with pytest.raises(ValueError):
        grid.local[1, 0] = 1.0

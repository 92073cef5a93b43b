"""The squared gradient norms a measured step feeds the noise-scale estimate: a few fused operations, the same sums a
norm per parameter gives."""

import pytest

torch = pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")

from pollux.agent.gradients import PRECONDITIONER_WARMUP_STEPS, GradientMeter  # noqa: E402
from pollux.agent.steps import StepTracker  # noqa: E402


def meter_for(optimizer_class=torch.optim.SGD):
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 3))
    optimizer = optimizer_class(model.parameters(), lr=0.01)
    return model, optimizer, GradientMeter(model.parameters(), optimizer, StepTracker())


def sqr(tensors):
    return sum(float((t.double() ** 2).sum()) for t in tensors)


def test_a_measured_step_sums_the_squares_of_the_local_norms_and_of_the_gradient():
    _, _, meter = meter_for()
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(p.shape, generator=g) for p in meter.params]
    local = [torch.randn(p.shape, generator=g) for p in meter.params for _ in range(2)]
    sums = meter.step_sqr_norms([torch.linalg.vector_norm(t) for t in local], grads)
    assert sums.dtype == torch.float64 and sums.tolist() == pytest.approx([sqr(local), sqr(grads)], rel=1e-6)
    assert meter.step_sqr_norms([], grads).tolist() == pytest.approx([0.0, sqr(grads)], rel=1e-6)


def test_consecutive_gradients_pair_into_two_small_batches_and_their_mean():
    _, _, meter = meter_for()
    g = torch.Generator().manual_seed(1)
    first = [torch.randn(p.shape, generator=g) for p in meter.params]
    second = [torch.randn(p.shape, generator=g) for p in meter.params]
    kept = [t.clone() for t in first]
    assert meter.consecutive_pair(first, batch_size=8) is None
    for t in first:
        t.zero_()  # the optimizer reuses its gradient tensors: the meter must have kept a copy
    mean = [(a + b) / 2 for a, b in zip(kept, second, strict=True)]
    pair = meter.consecutive_pair(second, batch_size=8).tolist()
    assert pair == pytest.approx([sqr(kept) + sqr(second), sqr(mean)], rel=1e-6)
    assert meter.consecutive_pair(second, batch_size=8) is None  # pairs do not overlap
    assert meter.consecutive_pair(second, batch_size=16) is None  # nor span two batch sizes


def test_adam_gradients_are_preconditioned_once_its_second_moments_have_settled():
    model, optimizer, meter = meter_for(torch.optim.Adam)
    x = torch.randn(16, 5, generator=torch.Generator().manual_seed(2))
    for _ in range(PRECONDITIONER_WARMUP_STEPS):
        assert not meter.ready  # too few steps averaged
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()
        meter.optimizer_stepped()
    assert meter.ready
    beta2, eps = optimizer.defaults["betas"][1], optimizer.defaults["eps"]
    for p, pre in zip(meter.params, meter.preconditioned_grads(), strict=True):
        state = optimizer.state[p]
        denom = (state["exp_avg_sq"] / (1 - beta2 ** float(state["step"]))).sqrt() + eps
        assert torch.allclose(pre, p.grad / denom)

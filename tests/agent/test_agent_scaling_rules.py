"""LR scaling rules: multipliers as defined, and a user's own rule is applied to the step (in-process, 1 replica)."""

import math

import pytest

torch = pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")

import pollux.agent as pa  # noqa: E402
from pollux.goodput import GradientStats, adascale_gain  # noqa: E402

STATS = GradientStats(sqr=1.0, var=3.0)


def test_multipliers_are_as_defined():
    assert pa.NoScale().lr_factor(256, 64, STATS) == 1.0
    assert pa.LinearScale().lr_factor(256, 64, STATS) == 4.0
    assert pa.SqrtScale().lr_factor(256, 64, STATS) == 2.0
    gain = pa.AdaScale().lr_factor(256, 64, STATS)
    assert gain == pytest.approx(float(adascale_gain(STATS, 64, 256)))
    assert gain == pytest.approx((3 + 1) / (3 / 4 + 1))
    assert 1.0 <= gain <= 4.0


def test_adascale_is_linear_when_noise_dominates_and_flat_without_noise():
    assert pa.AdaScale().lr_factor(256, 64, GradientStats(1e-9, 1.0)) == pytest.approx(4.0)
    assert pa.AdaScale().lr_factor(256, 64, GradientStats(1.0, 0.0)) == pytest.approx(1.0)
    assert pa.AdaScale().lr_factor(256, 64, None) == 1.0  # nothing measured yet


class CubeRoot(pa.ScalingRule):
    def lr_factor(self, batch_size, init_batch_size, grad_stats):
        return (batch_size / init_batch_size) ** (1 / 3)


def test_a_custom_rule_scales_the_learning_rate_of_the_step_and_only_that_step():
    agent = pa.init_process_group("gloo")
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1, bias=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ddp = pa.AdaptiveDataParallel(model, optimizer, scaling_rule=CubeRoot())
        data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
        loader = pa.AdaptiveDataLoader(data, batch_size=8)
        loader.autoscale_batch_size(64, (64, 64))  # forces one replica to train 64 = 8·M0 per step
        for x, y in loader:
            before = model.weight.detach().clone()
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            grad = model.weight.grad.detach().clone()
            optimizer.step()
            assert len(x) == 64
            assert model.weight.detach() == pytest.approx(before - 0.1 * 2.0 * grad, abs=1e-6)
            assert ddp.last_lr_factor == pytest.approx(math.pow(8, 1 / 3))
            assert optimizer.param_groups[0]["lr"] == 0.1  # the base LR is the scheduler's again
    finally:
        agent.close()

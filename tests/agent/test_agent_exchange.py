"""The statistics exchange's windows span about the same training time whatever a step takes (one process here; two
replicas sizing them alike run in test_agent_noise_scale)."""

import pytest

torch = pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")

from pollux.agent import exchange  # noqa: E402
from pollux.agent.exchange import (  # noqa: E402
    FIRST_WINDOW_STEPS,
    MAX_WINDOW_STEPS,
    WINDOW_TARGET_S,
    StatisticsExchange,
)
from pollux.agent.gns import NoiseScaleEstimator  # noqa: E402


class Clock:
    """A stand-in for time.perf_counter that advances a fixed step time per training step."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def windows_after(steps: int, step_s: float, monkeypatch: pytest.MonkeyPatch, **kwargs: object) -> list[int]:
    clock = Clock()
    monkeypatch.setattr(exchange.time, "perf_counter", clock)
    ex = StatisticsExchange(NoiseScaleEstimator(), distributed=False, **kwargs)  # type: ignore[arg-type]
    measured = (torch.tensor([4.0, 1.0], dtype=torch.float64), 2.0, 64)
    seen = []
    for _ in range(steps):
        clock.now += step_s
        ex.add_step(False, False, 32, 32, 10_000, 2, measured)
        seen.append(ex.interval_steps)
    return seen


@pytest.mark.parametrize(
    ("step_s", "expected"),
    [(0.010, round(WINDOW_TARGET_S / 0.010)), (0.3, 1), (1e-5, MAX_WINDOW_STEPS), (0.07, 3), (0.5, 1)],
)
def test_windows_span_the_target_time_once_the_step_time_is_known(monkeypatch, step_s, expected):
    seen = windows_after(200, step_s, monkeypatch)
    assert seen[0] == FIRST_WINDOW_STEPS  # the first window closes before any step time is known
    assert seen[-1] == expected


def test_a_fixed_interval_stays_fixed(monkeypatch):
    assert set(windows_after(50, 0.010, monkeypatch, interval_steps=4)) == {4}


def test_windows_pool_every_measured_step_into_the_estimate(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(exchange.time, "perf_counter", clock)
    pooled, per_step = NoiseScaleEstimator(), NoiseScaleEstimator()
    ex = StatisticsExchange(pooled, distributed=False)
    ref = StatisticsExchange(per_step, interval_steps=1, distributed=False)
    for i in range(300):
        clock.now += 0.001
        measured = (torch.tensor([4.0 + i % 3, 1.0], dtype=torch.float64), 2.0, 64)
        ex.add_step(False, False, 32, 32, 10_000, 2, measured)
        ref.add_step(False, False, 32, 32, 10_000, 2, measured)
    ex.flush(False, False)
    ref.flush(False, False)
    assert ex.interval_steps == MAX_WINDOW_STEPS
    assert pooled.sqr == pytest.approx(per_step.sqr, rel=0.05)
    assert pooled.trace == pytest.approx(per_step.trace, rel=0.05)

"""Adaptation in real training (2 processes, gloo): steps are timed and logged, the throughput model is refitted,
and the batch size follows the gradient noise scale.

workers/quadratic.py emulates a model whose compute grows with the batch (0.5 ms per example), so large batches
pay off only when the gradient is noisy: with φ ≈ 16 the best batch stays near M0 = 32, with φ ≈ 2048 it is
several times larger (goodput, Pollux §3.3). The noisy job may hold at most 32 examples per replica, so a larger
batch needs gradient accumulation.
"""

import json

import pytest

pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
from agent_launch import logs, run

from pollux.agent.report import read_report

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

COMMON = ["--max-batch-size", "512", "--seconds-per-example", "0.0005", "--adapt-interval", "10"]


def train(tmp_path_factory, name, args):
    root = tmp_path_factory.mktemp(name)
    out, report = root / "result.json", root / "report.json"
    env = {"POLLUX_REPORT_PATH": str(report)}
    codes = run("quadratic", ["--out", str(out), *COMMON, *args], 2, root / "logs", env)
    assert codes == [0, 0], logs(root / "logs")[-3000:]
    return json.loads(out.read_text()), read_report(report), logs(root / "logs")


@pytest.fixture(scope="module")
def low_noise(tmp_path_factory):
    return train(tmp_path_factory, "low", ["--trace", "16", "--epochs", "3", "--local-bsz-bounds", "8", "256"])


@pytest.fixture(scope="module")
def high_noise(tmp_path_factory):
    args = ["--trace", "2048", "--epochs", "3", "--local-bsz-bounds", "8", "32", "--accumulation"]
    return train(tmp_path_factory, "high", args)


def test_throughput_samples_are_recorded_and_fitted(high_noise):
    result, report, _ = high_noise
    assert result["throughput_configs"] >= 2  # M0 first, then at least one adapted configuration
    assert report.throughput_configs == result["throughput_configs"]
    params = report.throughput_params
    assert params is not None
    assert params.beta_c == pytest.approx(0.0005, rel=0.3)  # the emulated per-example compute cost
    assert report.goodput_function() is not None
    assert report.status == "finished" and report.batch.num_replicas == 2


def test_batch_size_grows_when_the_noise_scale_grows(low_noise, high_noise):
    low, high = low_noise[0], high_noise[0]
    assert high["noise_scale"] > 10 * low["noise_scale"]
    assert high["batch_sizes"][0] == low["batch_sizes"][0] == 32  # both start at M0
    assert max(low["batch_sizes"]) <= 128
    assert high["batch_sizes"][-1] > 2 * low["batch_sizes"][-1]
    assert max(high["batch_sizes"]) >= 3 * 32
    assert "batch size 32 -> " in high_noise[2]


def test_beyond_the_per_replica_maximum_the_agent_accumulates_gradients(high_noise):
    result, report, _ = high_noise
    assert result["final_local_bsz"] <= 32
    assert result["final_accum_steps"] >= 1
    assert report.batch.accum_steps == result["final_accum_steps"]

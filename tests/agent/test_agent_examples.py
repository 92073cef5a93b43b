"""The examples train under a torchrun-like launch (no downloads) and report to the scheduler."""

import math
import re

import pytest

pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
pytest.importorskip("sklearn", reason="the examples need it: make test installs it (pip install -e '.[examples]')")
from agent_launch import REPO, logs, run

from pollux.agent.report import read_report

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

EXAMPLES = REPO / "examples"


@pytest.mark.parametrize(
    ("script", "nprocs", "args"),
    [
        ("digits_mlp.py", 2, ["--epochs", "3"]),
        ("cifar_like_cnn.py", 1, ["--epochs", "1", "--examples", "512"]),
    ],
)
def test_example_trains_and_reports(tmp_path, script, nprocs, args):
    report = tmp_path / "report.json"
    extra = ["--checkpoint-dir", str(tmp_path / "ckpt"), "--report-path", str(report)]
    codes = run(EXAMPLES / script, [*args, *extra], nprocs, tmp_path / "logs")
    out = logs(tmp_path / "logs")
    assert codes == [0] * nprocs, out[-3000:]
    assert "epoch   0  loss" in out
    done = read_report(report)
    assert done.status == "finished" and done.batch.num_replicas == nprocs
    assert done.progress.epoch == int(args[1])


EPOCH_LINE = re.compile(r"epoch +\d+ .* batch +(\d+) .* noise scale (\S+)  lr x([\d.]+)")


def test_digits_prints_adascales_lr_factor_at_the_printed_batch_size_and_noise_scale(tmp_path):
    # Not the factor of the epoch's last step, its tail: that printed x0.04 for a last step of 1 example (M0 = 32).
    codes = run(EXAMPLES / "digits_mlp.py", ["--epochs", "5"], 1, tmp_path / "logs")
    out = logs(tmp_path / "logs")
    assert codes == [0], out[-3000:]
    lines = EPOCH_LINE.findall(out)
    assert len(lines) == 5, out[-3000:]
    for batch_text, phi_text, factor in lines:
        batch, phi = int(batch_text), math.inf if phi_text == "inf" else float(phi_text)
        gain = batch / 32 if math.isinf(phi) else (phi + 32) / (phi + batch) * batch / 32  # (M/M0)·EFFICIENCY(M)
        assert float(factor) == pytest.approx(gain, abs=0.006), (batch_text, phi_text, factor)
        assert 1.0 <= float(factor) <= batch / 32

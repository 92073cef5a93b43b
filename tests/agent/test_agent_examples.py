"""The examples train under a torchrun-like launch (no downloads) and report to the scheduler."""

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

"""`pollux simulate` end to end: the offline demo path, outputs on disk, and one-line errors for bad input."""

import json

import pytest
from typer.testing import CliRunner

from pollux.cli import app

runner = CliRunner()


@pytest.fixture
def no_data(tmp_path, monkeypatch):
    """An empty data folder and an empty cache: nothing to find and nothing fetched."""
    empty = tmp_path / "empty-data"
    empty.mkdir()
    monkeypatch.setenv("POLLUX_DATA_DIR", str(empty))
    monkeypatch.setenv("POLLUX_CACHE_DIR", str(tmp_path / "cache"))
    return empty


def test_demo_path_runs_offline_on_the_parametric_catalog(no_data, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["simulate", "workload-1", "--out", str(out), "--processes", "1", "-p", "fifo", "-p", "tiresias"]
    )
    assert result.exit_code == 0, result.output
    assert "parametric job catalog" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"fifo", "tiresias"}
    for metrics in summary.values():
        assert metrics["jobs_finished"] == metrics["jobs"] > 0
        assert metrics["avg_jct_s"] > 0
    for name in ("jobs-fifo.csv", "timeline-tiresias.csv", "jct-cdf.png", "cluster-timeline.png"):
        assert (out / name).stat().st_size > 0


def test_malformed_workload_row_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\ncifar10-0,-5,cifar10,1,128\n")
    result = runner.invoke(app, ["simulate", str(bad), "--out", str(tmp_path / "o"), "-p", "fifo"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") and "bad.csv:2" in lines[-1] and "time" in lines[-1]
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "args,needle",
    [
        (["-p", "nonesuch"], "unknown policy"),
        (["--interference", "1.5"], "--interference"),
        (["--nodes", "0"], "--nodes"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, args, needle):
    result = runner.invoke(app, ["simulate", "workload-1", "--out", str(tmp_path / "o"), *args])
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output

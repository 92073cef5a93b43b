"""`pollux simulate` checks every input before it starts its progress bars: a bad one is one line, exit 2, and no
"0/? jobs done" bar drawn for a simulation that never ran."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pollux.cli import app

HEADER = "name,time,application,num_replicas,batch_size\n"


def run(*args: str):
    return CliRunner().invoke(app, ["simulate", *args, "--processes", "1"])


def assert_input_error(result, needle: str) -> None:
    assert result.exit_code == 2, result.output
    assert "jobs done" not in result.output and "0/?" not in result.output, result.output
    assert "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1].startswith("error:") and needle in result.output, result.output


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ("cifar10-0,-5,cifar10,1,128\n", "bad.csv:2"),  # a negative submission time
        ("cifar10-0,0,nosuchmodel,1,128\n", "nosuchmodel"),
    ],
)
def test_a_malformed_workload_is_reported_before_any_progress_bar(tmp_path, rows, needle):
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + rows)
    assert_input_error(run(str(bad), "-p", "fifo", "--out", str(tmp_path / "o")), needle)


def test_a_missing_workload_is_reported_before_any_progress_bar(tmp_path):
    assert_input_error(run(str(tmp_path / "nope.csv"), "-p", "fifo", "--out", str(tmp_path / "o")), "nope.csv")


def test_an_out_path_that_is_a_file_is_reported_before_simulating(tmp_path, monkeypatch):
    empty = tmp_path / "empty-data"
    empty.mkdir()
    monkeypatch.setenv("POLLUX_DATA_DIR", str(empty))  # the offline path: data need not exist for this check
    monkeypatch.setenv("POLLUX_CACHE_DIR", str(tmp_path / "cache"))
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    assert_input_error(run("workload-1", "-p", "fifo", "--out", str(taken)), "--out")


def test_a_generated_workload_too_large_for_the_cluster_is_refused_before_any_progress_bar(tmp_path, monkeypatch):
    empty = tmp_path / "empty-data"
    empty.mkdir()
    monkeypatch.setenv("POLLUX_DATA_DIR", str(empty))  # offline: the generated workload has jobs of up to 24 GPUs
    monkeypatch.setenv("POLLUX_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "o"
    result = run("--nodes", "1", "--gpus-per-node", "1", "-p", "fifo", "--out", str(out))
    assert_input_error(result, "GPUs but the cluster has 1")
    assert not out.exists()


def test_a_workload_row_too_large_for_an_autoscaled_cluster_names_its_largest_size(tmp_path):
    big = tmp_path / "big.csv"
    big.write_text(HEADER + "cifar10-0,0,cifar10,16,128\n")
    cluster = ("--nodes", "4", "--gpus-per-node", "2", "--max-nodes", "2")  # autoscaled up to 2 nodes: 4 GPUs
    result = run(str(big), *cluster, "-p", "fifo", "--out", str(tmp_path / "o"))
    assert_input_error(result, "asks for 16 GPUs but the cluster has 4")

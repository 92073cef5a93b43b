"""`pollux simulate --cluster`: a preset or a file names the cluster, the table's title says which, and mixing it
with --nodes/--gpus-per-node or giving a bad file is a one-line error."""

import pytest
from typer.testing import CliRunner

from pollux.cli import app
from pollux.cluster import Cluster
from pollux.sim.cli import chosen_cluster

runner = CliRunner()

UNEVEN = """
[[group]]
gpu_type = "aws"
num_nodes = 4
gpus_per_node = 8

[[group]]
gpu_type = "aws"
num_nodes = 8
gpus_per_node = 4
"""


def test_without_cluster_options_the_cluster_is_the_pollux_artifacts_and_nodes_describe_a_uniform_one():
    assert chosen_cluster(None, None, None) == Cluster(16, 4, "aws")
    assert chosen_cluster(None, 8, None) == Cluster(8, 4, "aws")
    assert chosen_cluster(None, None, 8) == Cluster(16, 8, "aws")
    assert chosen_cluster("sia-heterogeneous", None, None).num_gpus == 64


@pytest.mark.parametrize(
    ("extra", "named"),
    [(["--nodes", "4"], "--nodes"), (["--gpus-per-node", "8"], "--gpus-per-node"), (["--nodes", "4"], "--cluster")],
)
def test_cluster_with_nodes_or_gpus_per_node_is_refused_naming_both(tmp_path, extra, named):
    args = ["simulate", "workload-1", "--cluster", "sia-homogeneous", *extra, "--out", str(tmp_path / "o")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert named in result.output and "Traceback" not in result.output


def test_a_bad_cluster_file_is_one_line_naming_the_file_and_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(UNEVEN.replace('"aws"', '"tpu"', 1))
    result = runner.invoke(app, ["simulate", "workload-1", "--cluster", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") and "bad.toml" in lines[-1] and "gpu_type 'tpu'" in lines[-1]


def test_the_results_table_names_the_cluster_of_a_file(tmp_path, monkeypatch):
    empty = tmp_path / "empty-data"
    empty.mkdir()
    monkeypatch.setenv("POLLUX_DATA_DIR", str(empty))
    monkeypatch.setenv("POLLUX_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "uneven.toml"
    path.write_text(UNEVEN)
    args = ["simulate", "workload-1", "--cluster", str(path), "-p", "fifo", "--processes", "1"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "o")], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "4×8 aws + 8×4 aws (64 GPUs)" in result.output


def test_a_typed_cluster_or_a_sia_workload_runs_the_sia_artifacts_models_per_type():
    from pollux.sim.cli import profiles_for

    assert profiles_for("workload-1", Cluster(16, 4)) == "pollux-osdi21"
    assert profiles_for("workload-1", chosen_cluster("sia-heterogeneous", None, None)) == "sia-sosp23"
    assert profiles_for("philly/workload-3", Cluster(16, 4)) == "sia-sosp23"


def test_simulate_on_the_heterogeneous_preset_writes_each_policys_jct_and_per_type_metrics(tmp_path):
    import json

    from pollux.data.locate import find_data_dir
    from pollux.errors import DataNotFoundError

    try:
        find_data_dir(artifact="sia-sosp23")
    except DataNotFoundError:
        pytest.skip("needs the Sia artifact's data (../shared/data or `pollux data fetch`)")
    out = tmp_path / "het"
    args = ["simulate", "philly/workload-1", "--cluster", "sia-heterogeneous", "-p", "gavel", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    gavel = summary["gavel"]
    assert gavel["avg_jct_s"] > 0 and gavel["jobs_finished"] == gavel["jobs"] == 160
    assert {"gpu_hours_per_job", "contention_mean", "contention_max"} <= set(gavel)
    assert all(0 < gavel[f"gpu_utilization_{t}"] <= 1 for t in ("aws", "rtx", "dgx-ext"))
    assert "6×4 aws + 3×8 rtx + 2×8 dgx-ext" in result.output
    assert (out / "gpu-hours-by-type.png").stat().st_size > 0

"""Autoscaled simulations: the node count within its bounds, boot time before capacity, node-hours as the integral
of nodes billed, determinism, jobs on a node given back stopped at a round's boundary, and the command line."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from pollux.autoscale import AutoscaleSettings
from pollux.cli import app
from pollux.cluster import Cluster
from pollux.data.locate import find_data_dir
from pollux.engine import Scheduler
from pollux.policies.registry import make_policy
from pollux.sim.backend import SimBackend, SimJobSpec
from pollux.sim.measured import load_measured_models
from pollux.sim.metrics import billing_window
from pollux.sim.run import SimConfig, simulate, simulated_policy
from pollux.sim.workload import WorkloadJob

BOOT_S = 300.0
SETTINGS = AutoscaleSettings(min_nodes=1, max_nodes=4, window_rounds=3)
APPS = ["cifar10", "bert", "cifar10", "cifar10", "bert", "cifar10"]


@pytest.fixture(scope="module")
def models():
    return dict(load_measured_models(find_data_dir().path))


def rows():
    return [WorkloadJob(f"j{i}", 240 * i, app, 2, 256 if app == "cifar10" else 24) for i, app in enumerate(APPS)]


def run(models, boot_time_s=BOOT_S):
    config = SimConfig(cluster=Cluster(4, 4), autoscale=SETTINGS, boot_time_s=boot_time_s)
    return simulate(rows(), simulated_policy("pollux", config, models), models, config)


@pytest.fixture(scope="module")
def result(models):
    return run(models)


def test_the_node_count_stays_within_its_bounds_and_changes(result):
    billed = [p.nodes_billed for p in result.nodes]
    assert len(result.nodes) == len(result.timeline)
    assert all(SETTINGS.min_nodes <= p.nodes_ready <= p.nodes_billed <= SETTINGS.max_nodes for p in result.nodes)
    assert len(set(billed)) > 1, "the workload should make the cluster grow and shrink"
    assert all(p.gpus_in_use <= n.nodes_ready * 4 for p, n in zip(result.timeline, result.nodes, strict=True))


def test_boot_time_delays_capacity(result):
    assert any(p.nodes_booting > 0 for p in result.nodes)
    initial = SETTINGS.min_nodes
    for point in result.nodes:
        earlier = [p.nodes_billed for p in result.nodes if p.time_s <= point.time_s - BOOT_S]
        assert point.nodes_ready <= (earlier[-1] if earlier else initial)


def test_without_boot_time_nodes_asked_for_are_ready_in_the_same_round(models):
    assert all(p.nodes_booting == 0 for p in run(models, boot_time_s=0.0).nodes)


def test_node_hours_are_the_integral_of_nodes_billed_over_the_billing_window(result):
    start, end = billing_window(result.jobs)
    times = np.array([p.time_s for p in result.nodes])
    billed = np.array([p.nodes_billed for p in result.nodes])
    seconds = np.arange(start, end) + 0.5  # the midpoint of every second of the window
    index = np.searchsorted(times, seconds, side="right") - 1
    nodes = np.where(index >= 0, billed[np.maximum(index, 0)], SETTINGS.min_nodes)
    assert result.summary["node_hours"] == pytest.approx(nodes.sum() / 3600, rel=1e-3)
    assert result.summary["nodes_max"] == max(billed.max(), SETTINGS.min_nodes)


def test_the_same_inputs_give_identical_results(models, result):
    again = run(models)
    assert again.nodes == result.nodes
    assert again.jobs == result.jobs
    assert again.summary == result.summary


def test_a_job_on_a_node_given_back_stops_at_the_boundary_and_pays_a_restart(models):
    specs = [SimJobSpec("a", "cifar10", 0, 4, 512), SimJobSpec("b", "cifar10", 0, 4, 512)]
    backend = SimBackend(Cluster(2, 4), specs, models)
    Scheduler(make_policy("fifo"), backend).step(0)
    backend.advance(0, 60)
    on_node = {job.spec.name: job.allocation.index(4) for job in backend.jobs}
    backend.resize(Cluster(1, 4), [on_node["b"]], 60)
    a, b = backend.jobs
    assert a.allocation == () and b.allocation == (4,)
    assert b.num_restarts == 0  # moved by renumbering alone: same placement, no restart
    Scheduler(make_policy("fifo"), backend).step(60)
    assert a.allocation == () and a.num_restarts == 0  # no room on one node: it waits
    backend.resize(Cluster(2, 4), [0], 120)
    Scheduler(make_policy("fifo"), backend).step(120)
    assert a.allocation == (0, 4) and a.num_restarts == 1 and a.restart_left_s == 30


runner = CliRunner()


def test_a_maximum_below_the_minimum_is_one_line_naming_both_flags_and_nothing_starts(tmp_path):
    out = tmp_path / "never"
    result = runner.invoke(app, ["simulate", "workload-1", "--min-nodes", "8", "--max-nodes", "4", "--out", str(out)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "--max-nodes 4" in lines[0] and "--min-nodes 8" in lines[0]
    assert "Traceback" not in result.output and not out.exists()


def test_boot_time_without_autoscaling_is_refused(tmp_path):
    result = runner.invoke(app, ["simulate", "workload-1", "--boot-time", "60", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--min-nodes/--max-nodes" in result.output


def test_simulate_with_autoscaling_reports_node_hours_and_plots_nodes(tmp_path):
    trace = tmp_path / "tiny.csv"
    trace.write_text(
        "name,time,application,num_replicas,batch_size\n" + "".join(f"j{i},{120 * i},cifar10,2,256\n" for i in range(3))
    )
    out = tmp_path / "out"
    args = ["simulate", str(trace), "-p", "fifo", "--processes", "1", "--min-nodes", "1", "--max-nodes", "2"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())["fifo"]
    assert summary["node_hours"] > 0 and 1 <= summary["nodes_mean"] <= 2
    assert (out / "nodes-timeline.png").stat().st_size > 0 and (out / "nodes-fifo.csv").stat().st_size > 0

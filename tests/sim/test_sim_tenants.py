"""Tenants in the simulator: every round, a tenant whose demand reaches its guarantee holds it within one round plus
its jobs' restore delay, under any policy, with and without leases; `pollux simulate --tenants` end to end (summary,
CSV, tables, report); a job of a tenant the file lacks refused before anything runs; the workload's tenant column."""

from __future__ import annotations

import bisect
import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pollux.cli import app
from pollux.cluster import Cluster
from pollux.errors import TraceError
from pollux.lease import Lease
from pollux.sim.generate import generate_workload
from pollux.sim.parametric import load_catalog
from pollux.sim.run import SimConfig, SimResult, simulate, simulated_policy
from pollux.sim.tenant_metrics import guaranteed_types
from pollux.sim.workload import Workload, WorkloadJob, read_workload, write_workload
from pollux.tenants import Tenant, Tenants

runner = CliRunner()
CLUSTER = Cluster(2, 4)  # 8 aws GPUs
INTERVAL_S, RESTORE_S = 60, 30
TENANTS = Tenants(
    (Tenant("a", guaranteed={"aws": 3}), Tenant("b", guaranteed={"aws": 3}), Tenant("c", 2.0, {"aws": 2}))
)


def tenant_workload(jobs: int, seed: int) -> list[WorkloadJob]:
    """A generated workload over half an hour, its jobs dealt to the tenants in turn, none larger than a node."""
    generated = generate_workload(jobs, 0.5, seed, source="summary")
    names = TENANTS.names
    return [
        replace(j, num_replicas=min(j.num_replicas, 4), tenant=names[i % len(names)])
        for i, j in enumerate(generated.jobs)
    ]


def gpus_at(result: SimResult, job: str, now: float) -> int:
    """The GPUs `job` held after the round at `now` (its track has a point wherever that changed)."""
    track = result.job_timelines.get(job, ())
    i = bisect.bisect_right([p[0] for p in track], now) - 1
    return track[i][1] if i >= 0 else 0


def broken_rounds(result: SimResult, rows: list[WorkloadJob], elastic: bool) -> list[tuple[str, float, str]]:
    """(tenant, time, what) of every round in which a tenant's demand had reached its guarantee on a type for longer
    than one round plus the restore delay, and it held less there, GPUs restoring counted, where the shortfall is not
    its own jobs' doing: under an elastic policy the GPUs it lacks were idle (the policy chose not to grow its jobs),
    under a rigid one none of its waiting jobs fits in what it lacks."""
    finish = {j.name: j.finish_s if j.finish_s is not None else float("inf") for j in result.jobs}
    capacity = CLUSTER.gpus_of_type("aws")
    broken = []
    for tenant in TENANTS.tenants:
        since: float | None = None
        for step in result.tenant_rounds:
            if "aws" not in guaranteed_types(tenant, step.quota):
                since = None
                continue
            since = step.now if since is None else since
            held = step.held.get(tenant.name, {}).get("aws", 0)
            lacking = tenant.guarantee_on("aws") - held
            if lacking <= 0 or step.now <= since + INTERVAL_S + RESTORE_S:
                continue
            if elastic:
                idle = capacity - sum(per_type.get("aws", 0) for per_type in step.held.values())
                if idle >= lacking:
                    continue
                broken.append((tenant.name, step.now, f"holds {held}, {idle} idle, the rest lent to others"))
            else:
                waiting = [
                    r.num_replicas
                    for r in rows
                    if r.tenant == tenant.name
                    and r.submit_time_s <= step.now < finish[r.name]
                    and gpus_at(result, r.name, step.now) == 0
                ]
                if waiting and min(waiting) <= lacking:
                    broken.append((tenant.name, step.now, f"holds {held} while a job of {min(waiting)} waits"))
    return broken


@pytest.fixture(scope="module")
def models():
    return load_catalog()


@pytest.mark.parametrize("lease", [None, 120.0], ids=["no-lease", "lease"])
@pytest.mark.parametrize(
    "policy,seed,jobs",
    [
        ("fifo", 1, 8),
        ("fifo", 2, 8),
        ("fifo", 3, 8),
        ("tiresias", 1, 8),
        ("tiresias", 3, 8),
        ("pollux", 1, 4),
        ("pollux", 2, 4),
    ],
)
def test_a_tenant_whose_demand_reaches_its_guarantee_holds_it_within_a_round_and_a_restore(
    models, policy, seed, jobs, lease
):
    rows = tenant_workload(jobs, seed)
    held = None if lease is None else Lease(lease, float(RESTORE_S))
    config = SimConfig(CLUSTER, INTERVAL_S, RESTORE_S, lease=held, tenants=TENANTS)
    chosen = simulated_policy(policy, config, models)
    result = simulate(rows, chosen, models, config)
    assert result.summary["jobs_finished"] == len(rows)
    judged = [
        step for step in result.tenant_rounds for t in TENANTS.tenants if guaranteed_types(t, step.quota) == ["aws"]
    ]
    assert judged, "the workload never brought a tenant's demand to its guarantee: the test would prove nothing"
    assert broken_rounds(result, rows, chosen.elastic_gpus) == []
    for tenant, metrics in result.tenants.items():
        assert metrics["jobs"] == sum(r.tenant == tenant for r in rows)
        assert metrics["gpu_hours_received"] <= CLUSTER.num_gpus * len(result.tenant_rounds) * INTERVAL_S / 3600


def test_tenant_metrics_integrate_entitlement_and_holding_over_the_rounds(models):
    rows = tenant_workload(8, 1)
    config = SimConfig(CLUSTER, INTERVAL_S, RESTORE_S, tenants=TENANTS)
    result = simulate(rows, simulated_policy("fifo", config, models), models, config)
    for name, metrics in result.tenants.items():
        entitled = sum(sum(s.quota.entitled[name].values()) * s.length_s for s in result.tenant_rounds) / 3600
        received = sum(sum(s.held.get(name, {}).values()) * s.length_s for s in result.tenant_rounds) / 3600
        assert metrics["gpu_hours_entitled"] == pytest.approx(entitled)
        assert metrics["gpu_hours_received"] == pytest.approx(received)
        # the GPU-time its jobs held, restores included, is what it received but for the idle ends of rounds
        held = sum(j.gpu_seconds for j in result.jobs if j.tenant == name) / 3600
        assert held <= metrics["gpu_hours_received"] + 1e-9
        assert 0 <= metrics["guarantee_held_share"] <= 1
    ratios = [m["gpu_hours_received"] / m["gpu_hours_entitled"] for m in result.tenants.values()]
    assert result.summary["tenant_min_fairness"] == pytest.approx(min(ratios))
    assert 0 < result.summary["tenant_jain"] <= 1


def test_without_tenants_a_run_has_no_quota_rounds_and_no_tenant_metrics(models):
    rows = tenant_workload(6, 2)
    config = SimConfig(CLUSTER, INTERVAL_S, RESTORE_S)
    result = simulate(rows, simulated_policy("fifo", config, models), models, config)
    assert not result.tenants and not result.tenant_rounds
    assert "tenant_jain" not in result.summary and all(j.tenant is None for j in result.jobs)
    assert "tenant" not in result.jobs[0].as_row()


# -- the command line ------------------------------------------------------------------------------------------------
TENANTS_FILE = '[[tenant]]\nname = "a"\nguaranteed = { aws = 4 }\n[[tenant]]\nname = "b"\nguaranteed = { aws = 4 }\n'


def write_inputs(folder: Path, tenants: list[str | None]) -> tuple[Path, Path]:
    """A workload of small measured jobs, one per tenant given (None: no tenant column), and the tenants file."""
    rows = [
        WorkloadJob(f"cifar10-{i}", 120 * i, "cifar10", 2, 128, tenant or "default") for i, tenant in enumerate(tenants)
    ]
    workload = write_workload(Workload("tiny", tuple(rows)), folder / "tiny.csv")
    spec = folder / "tenants.toml"
    spec.write_text(TENANTS_FILE)
    return workload, spec


@pytest.fixture(scope="module")
def tenant_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tenants")
    workload, spec = write_inputs(folder, ["a", "b", "a", "b", "a"])
    out = folder / "out"
    args = ["simulate", str(workload), "--nodes", "2", "--tenants", str(spec), "-p", "fifo", "-p", "tiresias"]
    result = runner.invoke(app, [*args, "--processes", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_simulate_with_tenants_writes_per_tenant_metrics_and_a_tenant_column(tenant_run):
    out, output = tenant_run
    summary = json.loads((out / "summary.json").read_text())
    for policy in ("fifo", "tiresias"):
        metrics = summary[policy]
        assert set(metrics["tenants"]) == {"a", "b"}
        for per_tenant in metrics["tenants"].values():
            assert set(per_tenant) == {
                "avg_jct_s",
                "jobs",
                "gpu_hours_received",
                "gpu_hours_entitled",
                "guarantee_held_share",
                "max_rounds_to_reclaim",
            }
        assert metrics["tenants"]["a"]["jobs"] == 3 and metrics["tenants"]["b"]["jobs"] == 2
        assert metrics["tenant_min_fairness"] > 0 and 0 < metrics["tenant_jain"] <= 1
        with (out / f"jobs-{policy}.csv").open() as handle:
            rows = list(csv.DictReader(handle))
        assert list(rows[0])[:2] == ["name", "tenant"]
        assert sorted(r["tenant"] for r in rows) == ["a", "a", "a", "b", "b"]
    assert "Tenants" in output and "tenant fair" in output and "received GPU-h" in output


def test_the_report_shows_received_against_entitled_per_tenant(tenant_run, browser):
    out, _ = tenant_run
    browser.open((out / "report.html").as_uri())
    browser.wait_for("document.body.dataset.ready === '1'", what="the report's script")
    rows = browser.evaluate(
        "[...document.querySelectorAll('#tenants tbody tr')].map(tr => [...tr.children].map(td => td.textContent))"
    )
    assert [row[1] for row in rows] == ["a", "b", "a", "b"]
    assert {row[0] for row in rows} - {""} == {"fifo", "tiresias"}
    headers = browser.evaluate("[...document.querySelectorAll('#tenants th')].map(th => th.textContent)")
    assert "received GPU-h" in headers and "entitled GPU-h" in headers and "guarantee held" in headers


@pytest.mark.parametrize(
    "tenants,listed",
    [(["a", "c"], "unknown tenant 'c'; tenants: a, b"), ([None], "unknown tenant 'default'; tenants: a, b")],
)
def test_a_job_of_a_tenant_the_file_lacks_is_refused_before_any_progress_bar(tmp_path, tenants, listed):
    workload, spec = write_inputs(tmp_path, tenants)
    result = runner.invoke(
        app, ["simulate", str(workload), "--nodes", "2", "--tenants", str(spec), "-p", "fifo", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and listed in lines[0] and "cifar10-" in lines[0]
    assert not (tmp_path / "summary.json").exists()


def test_tenants_with_autoscaling_are_refused_in_one_line(tmp_path):
    workload, spec = write_inputs(tmp_path, ["a"])
    result = runner.invoke(
        app,
        ["simulate", str(workload), "--tenants", str(spec), "--max-nodes", "4", "-p", "fifo", "--out", str(tmp_path)],
    )
    assert result.exit_code == 2
    assert "--tenants needs a fixed cluster" in result.output and "Traceback" not in result.output


# -- the workload's tenant column ------------------------------------------------------------------------------------
def test_the_tenant_column_is_read_and_written_only_where_a_job_has_a_tenant(tmp_path):
    plain = write_workload(Workload("p", (WorkloadJob("j0", 0, "cifar10", 1, 128),)), tmp_path / "plain.csv")
    assert plain.read_text() == "name,time,application,num_replicas,batch_size\nj0,0,cifar10,1,128\n"
    assert read_workload(plain).jobs[0].tenant == "default"
    jobs = (WorkloadJob("j0", 0, "cifar10", 1, 128), WorkloadJob("j1", 5, "ncf", 1, 64, "vision"))
    teams = write_workload(Workload("t", jobs), tmp_path / "teams.csv")
    assert teams.read_text().splitlines()[0].endswith(",tenant")
    assert read_workload(teams).jobs == jobs


def test_an_empty_tenant_is_a_trace_error_naming_the_line_and_field(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("name,time,application,num_replicas,batch_size,tenant\nj0,0,cifar10,1,128,a\nj1,5,ncf,1,64, \n")
    with pytest.raises(TraceError, match=r"bad\.csv:3: field 'tenant': empty"):
        read_workload(path)

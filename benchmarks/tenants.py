"""Tenants (issue 29): the two tables of its acceptance, flood and Philly's virtual clusters, policy by policy.

(a) `flood` on 16 × 4 T4 (64 GPUs): tenant `a` submits 100 jobs at time 0, tenant `b` 10 over the first two hours,
each guaranteed 32 GPUs (`pollux workload scenario flood`). Per policy, run under the quota layer with that tenants
file (`pollux` tenant-aware inside its search, every other policy behind the layer), plus `pollux` without a
tenants file (tenant-unaware): each tenant's average JCT against the same policy running that tenant's jobs alone
on its 32 guaranteed GPUs (8 × 4 T4, no tenants file). Acceptance, for `pollux` with tenants: b ≤ 1.25 × b alone,
a ≤ a alone (a borrows what b leaves idle).

(b) Philly-VC workloads (`pollux workload generate -n 160 --hours 8 --seed S --tenants philly`, seeds 1–8) on
`sia-heterogeneous` and on 16 × 4 T4, guarantees by each VC's share of the sampled GPU-time on that cluster. Per
workload and policy: the minimum over tenants with demand of received / entitled GPU-hours (`tenant_min_fairness`,
Astraea's fairness), Jain's index of those ratios, and the average JCT against `pollux` without a tenants file.
Acceptance, for `pollux` with tenants: minimum fairness ≥ 0.95 on every workload and average JCT within 5%.

Job models as `pollux simulate` picks them: the Pollux artifact's measured ones on T4 only, the Sia artifact's per
GPU type on `sia-heterogeneous`. Needs the artifacts' data (the Philly trace for the VCs).

Run: .venv/bin/python -m benchmarks.tenants [--table flood|philly ...] [--seeds 8] [--flood-seed 1]
     [--policy NAME ...] [--processes 2]
"""

from __future__ import annotations

import argparse
import time
import tomllib
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, fields
from functools import cache

import numpy as np
from rich.console import Console
from rich.table import Table

from pollux.cluster import Cluster
from pollux.cluster_spec import load_cluster
from pollux.policies.registry import POLICIES
from pollux.sim.run import SimConfig, SimResult, simulate, simulated_policy
from pollux.sim.tenant_workloads import FLOOD_TENANTS, TenantWorkload, flood_workload, philly_vc_workload, tenants_toml
from pollux.sim.workload import WorkloadJob
from pollux.tenants import Tenants, parse_tenants

HOUR = 3600.0
T4 = "16x4-t4"
CLUSTERS = {T4: Cluster(16, 4), "sia-heterogeneous": load_cluster("sia-heterogeneous")}
ALONE_CLUSTER = Cluster(8, 4)  # one flood tenant's 32 guaranteed GPUs
PHILLY_JOBS, PHILLY_HOURS = 160, 8.0  # the artifact's workloads
PHILLY_POLICIES = ("pollux", "astraea", "fifo", "tiresias")
UNAWARE = "pollux (no tenants)"  # the row of `pollux` without a tenants file
FLOOD_B_SLACK = 1.25  # b's avg JCT at most 1.25 × alone
MIN_FAIRNESS = 0.95
JCT_SLACK = 0.05


@dataclass(frozen=True)
class Run:
    """One simulation: which workload, on which cluster, under which policy, and with what tenants file."""

    scenario: str  # "flood" or "philly"
    seed: int
    cluster: str  # a key of CLUSTERS
    policy: str  # a registered name
    with_tenants: bool  # under the workload's tenants file (the quota layer); False: no file (tenant-unaware)
    only: str | None = None  # simulate this tenant's jobs alone on ALONE_CLUSTER (no tenants file)


@dataclass(frozen=True)
class Outcome:
    avg_jct_s: float
    avg_jct_by_tenant_s: dict[str, float]
    min_fairness: float | None  # None without a tenants file
    jain: float | None
    wall_s: float


def missing_interface() -> list[str]:
    """What the simulator must offer for tenants (issue 29, being built beside this benchmark) and does not yet."""
    missing = []
    if "tenants" not in {f.name for f in fields(SimConfig)}:
        missing.append("SimConfig.tenants")
    if "tenant" not in {f.name for f in fields(WorkloadJob)}:
        missing.append("WorkloadJob.tenant")
    return missing


@cache
def tenant_workload(scenario: str, seed: int, cluster: str) -> TenantWorkload:
    """The workload and tenants a run uses, exactly as `pollux workload generate --tenants philly` / `scenario flood`
    write them (cached per worker process)."""
    if scenario == "flood":
        return flood_workload(seed, CLUSTERS[cluster])
    return philly_vc_workload(PHILLY_JOBS, PHILLY_HOURS, seed, CLUSTERS[cluster])


@cache
def models_for(cluster: str) -> dict:
    """The job models `pollux simulate` runs on that cluster (`pollux.sim.cli.profiles_for`)."""
    from pollux.sim.measured import load_measured_models
    from pollux.sim.typed import load_typed_models

    if CLUSTERS[cluster].gpu_types == ("aws",):
        return dict(load_measured_models())
    return dict(load_typed_models("sia-sosp23"))


def run_one(run: Run) -> Outcome:
    chosen = tenant_workload(run.scenario, run.seed, run.cluster)
    rows = list(chosen.workload.jobs)
    cluster = CLUSTERS[run.cluster]
    if run.only is not None:
        rows = [job for job in rows if chosen.tenant_of[job.name] == run.only]
        cluster = ALONE_CLUSTER
    tenants: Tenants | None = None
    if run.with_tenants:  # through the file's text, as `pollux simulate --tenants FILE` reads it
        tenants = parse_tenants(tomllib.loads(tenants_toml(chosen.tenants, chosen.about)), cluster)
    models = models_for(run.cluster)
    config = SimConfig(cluster=cluster, tenants=tenants)
    result = simulate(rows, simulated_policy(run.policy, config, models), models, config)
    return outcome(result, chosen.tenant_of)


def outcome(result: SimResult, tenant_of: Mapping[str, str]) -> Outcome:
    """Average JCT in all and per tenant (by job name), and the tenant fairness the summary reports under a file."""
    jcts: dict[str, list[float]] = {}
    for job in result.jobs:
        if job.jct_s is not None:
            jcts.setdefault(tenant_of[job.name], []).append(job.jct_s)
    every = [jct for values in jcts.values() for jct in values]
    summary = result.summary
    return Outcome(
        float(np.mean(every)),
        {name: float(np.mean(values)) for name, values in jcts.items()},
        summary.get("tenant_min_fairness"),
        summary.get("tenant_jain"),
        result.wall_s,
    )


def flood_runs(seed: int, policies: list[str]) -> list[Run]:
    """Each policy with the tenants file and each tenant alone under it; `pollux` without the file too."""
    runs = [Run("flood", seed, T4, "pollux", False)] if "pollux" in policies else []
    for policy in policies:
        runs.append(Run("flood", seed, T4, policy, True))
        runs += [Run("flood", seed, T4, policy, False, only) for only in FLOOD_TENANTS]
    return runs


def flood_table(seed: int, policies: list[str], done: dict[Run, Outcome]) -> Table:
    a, b = FLOOD_TENANTS
    table = Table(
        title=f"flood (seed {seed}) on 16 × 4 T4: {a} 100 jobs at 0 s, {b} 10 over 2 h, 32 GPUs guaranteed each",
        caption=f"alone: the tenant's jobs alone on its 32 GPUs (8 × 4 T4), same policy; acceptance (pollux): "
        f"{b} ≤ {FLOOD_B_SLACK} × alone, {a} ≤ alone",
        caption_justify="left",
    )
    for column in ("policy", f"{b} JCT h", f"{b} alone h", f"{b} ratio", f"{a} JCT h", f"{a} alone h", f"{a} ratio"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for policy in policies:
        for with_tenants in (True, False) if policy == "pollux" else (True,):
            shared = done[Run("flood", seed, T4, policy, with_tenants)].avg_jct_by_tenant_s
            cells = []
            for tenant in (b, a):
                alone = done[Run("flood", seed, T4, policy, False, tenant)].avg_jct_by_tenant_s[tenant]
                cells += [f"{shared[tenant] / HOUR:.2f}", f"{alone / HOUR:.2f}", f"{shared[tenant] / alone:.2f}"]
            table.add_row(policy if with_tenants else UNAWARE, *cells)
    return table


def philly_runs(seeds: list[int], policies: list[str]) -> list[Run]:
    """Each policy with the workload's tenants file, and `pollux` without it (the JCT every row is set against)."""
    return [
        Run("philly", seed, cluster, policy, with_tenants)
        for cluster in CLUSTERS
        for seed in seeds
        for policy, with_tenants in [*((p, True) for p in policies), ("pollux", False)]
    ]


def philly_table(cluster: str, seeds: list[int], policies: list[str], done: dict[Run, Outcome]) -> Table:
    table = Table(
        title=f"Philly VCs as tenants on {cluster}: {PHILLY_JOBS} jobs over {PHILLY_HOURS:g} h, guarantees by "
        "GPU-time share",
        caption=f"min fair: min over tenants of received / entitled GPU-hours; vs unaware: avg JCT / pollux's "
        f"without tenants; acceptance (pollux): min fair ≥ {MIN_FAIRNESS}, avg JCT within {JCT_SLACK:.0%}",
        caption_justify="left",
    )
    for column in ("seed", "policy", "tenants", "min fair", "Jain", "avg JCT h", "vs unaware"):
        table.add_column(column, justify="left" if column in ("seed", "policy") else "right")
    for seed in seeds:
        unaware = done[Run("philly", seed, cluster, "pollux", False)]
        tenants = len(tenant_workload("philly", seed, cluster).tenants.tenants)
        table.add_row(str(seed), UNAWARE, str(tenants), "-", "-", f"{unaware.avg_jct_s / HOUR:.2f}", "1.00")
        for policy in policies:
            mine = done[Run("philly", seed, cluster, policy, True)]
            table.add_row(
                "",
                policy,
                "",
                "-" if mine.min_fairness is None else f"{mine.min_fairness:.2f}",
                "-" if mine.jain is None else f"{mine.jain:.2f}",
                f"{mine.avg_jct_s / HOUR:.2f}",
                f"{mine.avg_jct_s / unaware.avg_jct_s:.2f}",
                end_section=policy == policies[-1],
            )
    return table


def philly_verdict(cluster: str, seeds: list[int], done: dict[Run, Outcome]) -> str:
    """One line: on how many workloads `pollux` with tenants met each acceptance bound."""
    mine = [done[Run("philly", s, cluster, "pollux", True)] for s in seeds]
    unaware = [done[Run("philly", s, cluster, "pollux", False)] for s in seeds]
    fair = sum(m.min_fairness is not None and m.min_fairness >= MIN_FAIRNESS for m in mine)
    close = sum(abs(m.avg_jct_s / u.avg_jct_s - 1) <= JCT_SLACK for m, u in zip(mine, unaware, strict=True))
    return (
        f"{cluster}: pollux with tenants: min fairness ≥ {MIN_FAIRNESS} on {fair} of {len(seeds)} workloads; "
        f"avg JCT within {JCT_SLACK:.0%} of pollux without tenants on {close} of {len(seeds)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="append", choices=("flood", "philly"), help="default: both")
    parser.add_argument("--seeds", type=int, default=8, help="Philly-VC workloads generated with seeds 1..N")
    parser.add_argument("--flood-seed", type=int, default=1)
    parser.add_argument(
        "--policy",
        action="append",
        help=f"default: every registered policy (flood); {', '.join(PHILLY_POLICIES)} (philly)",
    )
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    missing = missing_interface()
    if missing:
        parser.exit(2, f"error: benchmarks.tenants needs {' and '.join(missing)} (issue 29's simulator side)\n")
    tables = args.table or ["flood", "philly"]
    registered = [name for name in POLICIES if name != "pollux-unaware"]  # it decides as pollux on one GPU type
    flood_policies = args.policy or registered
    philly_policies = args.policy or [name for name in PHILLY_POLICIES if name in POLICIES]
    seeds = list(range(1, args.seeds + 1))
    runs = (flood_runs(args.flood_seed, flood_policies) if "flood" in tables else []) + (
        philly_runs(seeds, philly_policies) if "philly" in tables else []
    )
    console = Console(width=150)
    started = time.perf_counter()
    runs.sort(key=lambda run: run.policy != "pollux")  # the slowest first, so the processes end together
    done: dict[Run, Outcome] = {}
    with ProcessPoolExecutor(max_workers=args.processes) as pool:
        futures = {pool.submit(run_one, run): run for run in runs}
        for future in as_completed(futures):  # one line per simulation: the whole table takes an hour or more
            run = futures[future]
            done[run] = future.result()
            label = f"{run.scenario} seed {run.seed} {run.cluster} {run.policy}"
            label += "" if run.with_tenants or run.only else " (no tenants)"
            label += f" ({run.only} alone)" if run.only else ""
            fairness = "" if done[run].min_fairness is None else f", min fairness {done[run].min_fairness:.2f}"
            console.print(
                f"[{len(done)}/{len(runs)}] {label}: avg JCT {done[run].avg_jct_s / HOUR:.2f} h{fairness}; "
                f"{done[run].wall_s:.0f} s, {time.perf_counter() - started:.0f} s since start"
            )
    if "flood" in tables:
        console.print(flood_table(args.flood_seed, flood_policies, done))
    if "philly" in tables:
        for cluster in CLUSTERS:
            console.print(philly_table(cluster, seeds, philly_policies, done))
            if "pollux" in philly_policies:
                console.print(philly_verdict(cluster, seeds, done))
    simulated = sum(outcome.wall_s for outcome in done.values())
    console.print(
        f"{len(runs)} simulations, {simulated:.0f} s simulating, {time.perf_counter() - started:.0f} s wall "
        f"({args.processes} processes, this machine)"
    )


if __name__ == "__main__":
    main()

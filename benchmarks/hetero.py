"""Heterogeneous clusters: our simulator beside the Sia paper's Table 3 (SOSP'23), trace by trace.

Each policy runs on every workload of a trace (`philly` 1–8, `saturn` = Helios 1–10) on the `sia-heterogeneous`
cluster (6 × 4 T4 + 3 × 8 RTX 2080Ti + 2 × 8 A100, 64 GPUs), with the Sia artifact's job models, calibration and
restore delays. Metrics as Sia publishes them: average JCT pooled over all jobs of the trace (± the spread of the
per-workload means), p99 of the pooled JCTs, makespan per workload averaged, GPU-hours per job, contention
(running + queued jobs per round: the mean of per-workload means, and the max), and finish-time fairness by Sia's
Equation 3 (`Sia ρ`: the worst over the trace's workloads / the share of jobs above 1, the mean of per-workload
shares). Published rows are Table 3's:
`pollux` beside Sia, `pollux-unaware` beside the paper's Pollux, `gavel` beside Gavel+TunedJobs. On a whole
trace, two rows follow `pollux`'s: Sia's own code rerun on the same workloads (`SIA_RERUN`) beside Table 3, and
`pollux` beside that rerun, then a line comparing the two workload by workload. On Helios, a line puts `gavel` beside
the artifact's own Gavel rerun (`GAVEL_RERUN_WORKLOADS`), workload by workload, and over all 10. A line per
simulation as it finishes (a whole trace takes tens of minutes), each also appended to `table3-<trace>.jsonl` in the
plot's folder.

With `--by-application`, a second table per trace says where each policy's JCT goes, model by model: its share of
the summed JCT, mean JCT against the job alone on its share of the cluster (`isolated`), restarts, queueing and
GPU-hours per job (the numbers that say why a policy sits where it does against the published row).

With `--rates`, the Sia paper's Figure 7 instead: average JCT as the arrival rate grows, on the artifact's
Helios-sampled `rate_{10..50}` workloads (10 per rate) on the same cluster; every policy but the tenants' one by
default; the mean of per-workload average JCTs per policy and rate as a table and a plot (`--plot`), and beside the
paper's claim (Sia 50-65% below Pollux at every rate) our `pollux` against `pollux-unaware` rate by rate. Sia's
own code was not rerun on these workloads. The whole figure is 50 workloads per policy (a 50 jobs/h one holds 400
jobs): hours on a 2-core machine; `--workloads 1` and three policies give its shape. A line per simulation as it
finishes, each also appended to the plot's name with `.jsonl` (a run cut short keeps what it measured).

Run: .venv/bin/python -m benchmarks.hetero [--trace philly|saturn ...] [--policy NAME ...] [--workloads 8]
     [--processes 2] [--setting p=-0.5 ...] [--by-application]
     .venv/bin/python -m benchmarks.hetero --rates [--rate 10 ...] [--workloads 10] [--policy NAME ...]
     [--plot results/figure7-rates.png]
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import astuple, dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from pollux.cluster_spec import load_cluster
from pollux.sim.run import SimConfig, simulate, simulated_policy
from pollux.sim.typed import load_typed_models
from pollux.sim.workload import read_workload

TRACES = {"philly": 8, "saturn": 10}
RATES = (10, 20, 30, 40, 50)  # jobs per hour: the folders `rate_R` of the Sia artifact's scale workloads
RATE_WORKLOADS = 10
SIA_BELOW_POLLUX = (0.50, 0.65)  # Figure 7: Sia's avg JCT is this much below Pollux's at every rate
POLICIES = ("pollux", "pollux-unaware", "gavel")
HOUR = 3600.0


@dataclass(frozen=True)
class Published:
    """One row of Table 3: hours, but for contention (jobs)."""

    policy: str
    avg_jct_h: float
    p99_h: float
    makespan_h: float
    gpu_hours_per_job: float

    @property
    def metrics(self) -> tuple[float, float, float, float]:
        """The row's numbers in the table's column order."""
        return (self.avg_jct_h, self.p99_h, self.makespan_h, self.gpu_hours_per_job)


# The Sia paper's Table 3, heterogeneous 64 GPUs; the policy it stands beside here.
TABLE_3: dict[tuple[str, str], Published] = {
    ("philly", "pollux"): Published("Sia", 0.6, 9.5, 14.2, 4.0),
    ("philly", "pollux-unaware"): Published("Pollux", 1.0, 14.9, 24.5, 5.6),
    ("philly", "gavel"): Published("Gavel+TJ", 1.9, 30.0, 33.8, 9.0),
    ("saturn", "pollux"): Published("Sia", 0.7, 10.9, 14.9, 4.8),
    ("saturn", "pollux-unaware"): Published("Pollux", 1.0, 15.0, 25.5, 5.9),
    ("saturn", "gavel"): Published("Gavel+TJ", 2.5, 38.7, 43.0, 12.1),
}

# Sia's own simulator and policy, run on the same workloads and cluster (docs/design.md, "Sia's artifact, rerun"):
# repository siasosp23/artifacts, commit 37c68be, `sia-simulator/` as published (only its two policies that
# `--policy=sia` never uses stubbed), with `run_experiment.sh`'s command (p = -0.5, λ_a 0.01, λ_n 1.1, 60 s rounds,
# --project_throughput --share_max_replicas), CBC through cvxpy 1.4.4, pandas 1.5.3, on this project's 2-core VM.
# Measured once and kept here as figures: the code is not ours to ship. `benchmarks.sia_replay --logs DIR` prints
# them again from that run's logs: mean of per-workload average JCTs, pooled p99, mean makespan, GPU-hours per job
# (restores included).
SIA_RERUN: dict[str, Published] = {
    "philly": Published("Sia's code, rerun", 0.656, 9.93, 14.45, 3.83),
    "saturn": Published("Sia's code, rerun", 0.742, 10.72, 14.90, 4.69),
}
# Its average JCT (h) per workload, workload-1 first.
SIA_RERUN_WORKLOADS: dict[str, tuple[float, ...]] = {
    "philly": (0.542, 0.728, 0.569, 0.689, 0.655, 0.583, 0.843, 0.639),
    "saturn": (0.581, 0.722, 0.728, 0.867, 0.664, 0.662, 0.588, 0.785, 1.022, 0.796),
}

# The Sia artifact's own Gavel (commit aaf7a0d, `--policy=gavel --interval=360`, cvxpy 1.4.4 with ECOS), rerun on
# Helios (docs/design.md, "Gavel"): avg JCT (h) of the workloads rerun, and over all 10 (its README's sample run).
GAVEL_RERUN_WORKLOADS: dict[int, float] = {1: 1.798, 2: 1.717, 4: 2.56, 5: 2.03, 6: 1.79, 7: 1.41, 8: 3.351, 10: 4.194}
GAVEL_RERUN_MEAN_H = 2.548


@dataclass(frozen=True)
class AppTotals:
    """Sums over one application's finished jobs in one run."""

    jobs: int = 0
    jct_s: float = 0.0
    isolated_s: float = 0.0
    restarts: int = 0
    queueing_s: float = 0.0
    gpu_s: float = 0.0

    def __add__(self, other: AppTotals) -> AppTotals:
        return AppTotals(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


@dataclass(frozen=True)
class Run:
    jcts_s: tuple[float, ...]
    makespan_s: float
    gpu_hours_per_job: float
    contention_mean: float
    contention_max: float
    sia_worst_fairness: float  # the largest ρ by Sia's Equation 3
    sia_unfair_share: float  # the share of jobs with that ρ > 1
    wall_s: float
    round_s: float  # median wall time of one policy round
    by_application: dict[str, AppTotals]


def run_one(policy_name: str, workload: str, settings: tuple[tuple[str, float | bool], ...] = ()) -> Run:
    models = load_typed_models("sia-sosp23")
    rows = read_workload(workload, applications=models).jobs
    config = SimConfig(cluster=load_cluster("sia-heterogeneous"))
    policy = simulated_policy(policy_name, config, models, **dict(settings))
    rounds: list[float] = []
    optimize = policy.optimize

    def timed(*args, **kwargs):
        start = time.perf_counter()
        result = optimize(*args, **kwargs)
        rounds.append(time.perf_counter() - start)
        return result

    policy.optimize = timed  # type: ignore[method-assign]
    start = time.perf_counter()
    result = simulate(rows, policy, models, config)
    s = result.summary
    by_application: dict[str, AppTotals] = {}
    for job in result.jobs:
        if job.jct_s is None:
            continue
        totals = AppTotals(1, job.jct_s, job.isolated_jct_s or 0.0, job.restarts, job.queueing_s, job.gpu_seconds)
        by_application[job.application] = by_application.get(job.application, AppTotals()) + totals
    return Run(
        tuple(j.jct_s for j in result.jobs if j.jct_s is not None),
        s["makespan_s"],
        s["gpu_hours_per_job"],
        s["contention_mean"],
        s["contention_max"],
        s["sia_worst_fairness"],
        s["sia_unfair_share"],
        time.perf_counter() - start,
        float(np.median(rounds)) if rounds else 0.0,
        by_application,
    )


def application_table(trace: str, count: int, policies: list[str], runs: list[list[Run]]) -> Table:
    """Per policy and model, pooled over the trace's workloads: where the JCT goes."""
    table = Table(title=f"{trace}: where the JCT goes, per model (pooled over {count} workloads)")
    columns = ("policy", "model", "jobs", "JCT share", "JCT h", "isolated h", "ratio", "restarts", "queue h", "GPU-h")
    for column in columns:
        table.add_column(column, justify="left" if column in ("policy", "model") else "right")
    for policy, mine in zip(policies, runs, strict=True):
        pooled: dict[str, AppTotals] = {}
        for run in mine:
            for app, totals in run.by_application.items():
                pooled[app] = pooled.get(app, AppTotals()) + totals
        summed = sum(t.jct_s for t in pooled.values()) or 1.0
        for app, t in sorted(pooled.items()):
            table.add_row(
                policy,
                app,
                str(t.jobs),
                f"{t.jct_s / summed:.0%}",
                f"{t.jct_s / t.jobs / HOUR:.2f}",
                f"{t.isolated_s / t.jobs / HOUR:.2f}",
                f"{t.jct_s / t.isolated_s:.2f}" if t.isolated_s > 0 else "-",
                f"{t.restarts / t.jobs:.1f}",
                f"{t.queueing_s / t.jobs / HOUR:.2f}",
                f"{t.gpu_s / t.jobs / HOUR:.2f}",
            )
    return table


def against(ours: tuple[float, ...], theirs: Published, digits: int) -> list[str]:
    """Cells `ours / theirs (±%)` for avg JCT, p99, makespan and GPU-hours per job; `digits` of theirs shown (the
    paper's one decimal, or a rerun's two)."""
    return [f"{v:.2f} / {t:.{digits}f} ({v / t - 1:+.0%})" for v, t in zip(ours, theirs.metrics, strict=True)]


def gavel_line(means_h: list[float]) -> str:
    """Our `gavel` beside the artifact's Gavel, workload by workload (those rerun), and over all 10 Helios workloads."""
    pairs = [(i, mine, GAVEL_RERUN_WORKLOADS[i]) for i, mine in enumerate(means_h, 1) if i in GAVEL_RERUN_WORKLOADS]
    listed = ", ".join(f"w{i} {mine:.3f}/{theirs:.3f} ({mine / theirs - 1:+.1%})" for i, mine, theirs in pairs)
    line = f"gavel / the artifact's Gavel, avg JCT h per workload: {listed}"
    if len(means_h) == TRACES["saturn"]:
        mean = float(np.mean(means_h))
        line += f"; all 10: {mean:.3f}/{GAVEL_RERUN_MEAN_H:.3f} ({mean / GAVEL_RERUN_MEAN_H - 1:+.1%})"
    return line


def parse_setting(text: str) -> tuple[str, float | bool]:
    """`p=-0.5` or `discount_starts=false`: a `PolicySettings` field and its value."""
    key, _, value = text.partition("=")
    if value.lower() in ("true", "false"):
        return key, value.lower() == "true"
    return key, float(value)


def rate_policies() -> list[str]:
    """Every registered policy but the tenants' scheduler, which needs tenants."""
    from pollux.policies.registry import POLICIES as REGISTERED
    from pollux.sim.cli import TENANT_PEERS

    return [name for name in REGISTERED if name not in TENANT_PEERS]


def rates_figure(
    rates: list[int], policies: list[str], mean_h: dict[tuple[str, int], float], plot: Path, console: Console
) -> None:
    """Figure 7: the table of avg JCT per policy and rate, pollux against pollux-unaware, and the plot."""
    table = Table(title="Figure 7: avg JCT (h) vs arrival rate, sia-heterogeneous (mean of per-workload averages)")
    table.add_column("policy")
    for rate in rates:
        table.add_column(f"{rate} jobs/h", justify="right")
    for policy in policies:
        table.add_row(policy, *(f"{mean_h[policy, rate]:.2f}" for rate in rates))
    console.print(table)
    if "pollux" in policies and "pollux-unaware" in policies:
        cuts = ", ".join(
            f"{rate}: {mean_h['pollux', rate] / mean_h['pollux-unaware', rate] - 1:+.0%}" for rate in rates
        )
        low, high = SIA_BELOW_POLLUX
        console.print(f"pollux vs pollux-unaware per rate: {cuts} (the paper: Sia {low:.0%}-{high:.0%} below Pollux)")
    from pollux.sim.palette import policy_colors
    from pollux.sim.report import _pyplot

    plt = _pyplot()
    colors = policy_colors(policies)
    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    for policy in policies:
        axes.plot(rates, [mean_h[policy, r] for r in rates], marker="o", label=policy, color=colors[policy])
    axes.set_xticks(rates)
    axes.set_xlabel("arrival rate (jobs/h)")
    axes.set_ylabel("avg JCT (h)")
    axes.set_title("sia-heterogeneous, Helios-sampled rate workloads")
    axes.legend(fontsize=8)
    plot.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(plot, dpi=120, bbox_inches="tight")
    plt.close(figure)
    console.print(f"plot: {plot}")


def run_with_progress(
    tasks: list[tuple[str, str]],
    settings: tuple[tuple[str, float | bool], ...],
    processes: int,
    log: Path,
    console: Console,
) -> dict[tuple[str, str], Run]:
    """Every (policy, workload) simulated, a line per one finished (the whole figure takes hours), each also
    appended to `log` as JSON as it finishes, so a run cut short still leaves what it measured."""
    log.parent.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, str], Run] = {}
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=processes) as pool, log.open("a") as out:
        futures = {pool.submit(run_one, policy, workload, settings): (policy, workload) for policy, workload in tasks}
        for future in as_completed(futures):
            policy, workload = task = futures[future]
            run = runs[task] = future.result()
            avg_h = float(np.mean(run.jcts_s)) / HOUR
            line = {"policy": policy, "workload": workload, "avg_jct_h": avg_h, "jobs": len(run.jcts_s)}
            out.write(json.dumps({**line, "settings": dict(settings), "wall_s": run.wall_s}) + "\n")
            out.flush()
            elapsed = time.perf_counter() - started
            console.print(
                f"[{len(runs)}/{len(tasks)}] {policy} {workload}: avg JCT {avg_h:.2f} h "
                f"({run.wall_s:.0f} s; {elapsed / 60:.0f} min so far)"
            )
    return runs


def main_rates(args: argparse.Namespace, settings: tuple[tuple[str, float | bool], ...], console: Console) -> None:
    rates = args.rate or list(RATES)
    count = min(args.workloads or RATE_WORKLOADS, RATE_WORKLOADS)
    policies = args.policy or rate_policies()
    # workload by workload, every policy on each: a run cut short has compared them on the same workloads
    tasks = [(p, f"rate_{r}/workload-{i}") for i in range(1, count + 1) for r in rates for p in policies]
    runs = run_with_progress(tasks, settings, args.processes, Path(args.plot).with_suffix(".jsonl"), console)
    mean_h = {
        (p, r): float(np.mean([np.mean(runs[p, f"rate_{r}/workload-{i}"].jcts_s) for i in range(1, count + 1)])) / HOUR
        for p in policies
        for r in rates
    }
    rates_figure(rates, policies, mean_h, Path(args.plot), console)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", action="append", default=None, choices=sorted(TRACES))
    parser.add_argument("--policy", action="append", default=None)
    parser.add_argument("--workloads", type=int, default=None, help="the first N workloads of each trace")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--setting", action="append", default=[], help="a PolicySettings field for the policies that have it: KEY=VALUE"
    )
    parser.add_argument("--by-application", action="store_true", help="also where each policy's JCT goes, per model")
    parser.add_argument("--rates", action="store_true", help="Figure 7: avg JCT vs arrival rate instead of Table 3")
    parser.add_argument("--rate", action="append", type=int, choices=RATES, help="with --rates: these rates only")
    parser.add_argument("--plot", default="results/figure7-rates.png", help="with --rates: where the plot goes")
    args = parser.parse_args()
    settings = tuple(parse_setting(text) for text in args.setting)
    if args.rates:
        console = Console(width=170)
        started = time.perf_counter()
        main_rates(args, settings, console)
        console.print(f"total wall time {time.perf_counter() - started:.1f} s (this machine)")
        return
    traces = args.trace or list(TRACES)
    policies = args.policy or list(POLICIES)
    console = Console(width=170)
    started = time.perf_counter()
    for trace in traces:
        count = min(args.workloads or TRACES[trace], TRACES[trace])
        workloads = [f"{trace}/workload-{i}" for i in range(1, count + 1)]
        tasks = [(p, w) for p in policies for w in workloads]
        log = Path(args.plot).parent / f"table3-{trace}.jsonl"  # a line per run as it ends, as for --rates
        runs = run_with_progress(tasks, settings, args.processes, log, console)
        table = Table(title=f"{trace}: {count} workloads on sia-heterogeneous, ours / published (Table 3)")
        for column in ("policy", "avg JCT h", "± h", "p99 h", "makespan h", "GPU-h/job", "contention", "Sia ρ"):
            table.add_column(column, justify="left" if column == "policy" else "right")
        table.add_column("round ms", justify="right")
        for policy in policies:
            mine = [runs[policy, w] for w in workloads]
            pooled = np.concatenate([r.jcts_s for r in mine]) / HOUR
            means = [np.mean(r.jcts_s) / HOUR for r in mine]
            ours = (
                float(pooled.mean()),
                float(np.percentile(pooled, 99)),
                float(np.mean([r.makespan_s for r in mine]) / HOUR),
                float(np.mean([r.gpu_hours_per_job for r in mine])),
            )
            published = TABLE_3.get((trace, policy))
            cells = [f"{v:.2f}" for v in ours] if published is None else against(ours, published, 1)
            label = policy if published is None else f"{policy} (vs {published.policy})"
            mean_contention = np.mean([r.contention_mean for r in mine])
            contention = f"{mean_contention:.1f} / {max(r.contention_max for r in mine):.0f}"
            unfair = np.mean([r.sia_unfair_share for r in mine])
            fairness = f"{max(r.sia_worst_fairness for r in mine):.2f} / {unfair:.1%}"
            round_ms = f"{np.median([r.round_s for r in mine]) * 1000:.0f}"
            table.add_row(label, cells[0], f"{np.std(means):.2f}", *cells[1:], contention, fairness, round_ms)
            if policy == "pollux" and count == TRACES[trace]:
                rerun, sia = SIA_RERUN[trace], TABLE_3[trace, "pollux"]
                for name, row in (
                    (f"{rerun.policy} (vs Sia)", against(rerun.metrics, sia, 1)),
                    ("pollux (vs Sia's code)", against(ours, rerun, 2)),
                ):
                    table.add_row(name, row[0], "", *row[1:])
        console.print(table)
        if "pollux" in policies and count == TRACES[trace]:
            pollux_h = [float(np.mean(runs["pollux", w].jcts_s)) / HOUR for w in workloads]
            pairs = list(zip(pollux_h, SIA_RERUN_WORKLOADS[trace], strict=True))
            lower = sum(p < sia for p, sia in pairs)
            listed = ", ".join(f"{p:.3f}/{sia:.3f}" for p, sia in pairs)
            console.print(f"pollux / Sia's code, avg JCT h per workload: lower on {lower} of {count}: {listed}")
        if "gavel" in policies and trace == "saturn":
            console.print(gavel_line([float(np.mean(runs["gavel", w].jcts_s)) / HOUR for w in workloads]))
        if args.by_application:
            console.print(
                application_table(trace, count, policies, [[runs[p, w] for w in workloads] for p in policies])
            )
    console.print(f"total wall time {time.perf_counter() - started:.1f} s (this machine; round ms is per policy round)")


if __name__ == "__main__":
    main()

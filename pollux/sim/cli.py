"""`pollux simulate`: every chosen policy on one workload, in parallel processes, with a table and plots.

The simulator itself (numpy, scipy, the policies) and rich's progress bars are imported where they are used, not
atop this module: `pollux --help` and `pollux simulate --help` load this file, and answer in a fraction of a second.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from pollux.cluster import DEFAULT_GPU_TYPE, Cluster
from pollux.cluster_spec import DEFAULT_PRESET, PRESETS, load_cluster
from pollux.console import plain_console
from pollux.data.locate import DATASET, SIA_DATASET, Artifact
from pollux.defaults import RESTART_DELAY_S, ROUND_INTERVAL_S
from pollux.errors import DataNotFoundError, PolluxError
from pollux.option_bounds import bounds
from pollux.sim.workload import workload_artifact

if TYPE_CHECKING:
    from rich.table import Table

    from pollux.autoscale import AutoscaleSettings
    from pollux.sim.jobmodel import JobModel
    from pollux.sim.run import SimConfig, SimResult
    from pollux.sim.typed import TypedJobModel
    from pollux.sim.workload import Workload
    from pollux.tenants import Tenants

DEFAULT_WORKLOAD = "workload-1"
OFFLINE_JOBS, OFFLINE_HOURS = 160, 8.0


@dataclass(frozen=True)
class SimInputs:
    """Where models and the workload come from, as resolved once in the parent process."""

    workload: str
    data_dir: Path | None  # the folder of the artifact whose job models run (`profiles`)
    offline: bool  # no artifact data: parametric catalog + generated workload
    seed: int
    profiles: Artifact = DATASET  # the artifact whose job models run
    typed: bool = False  # the cluster has GPU types other than the Pollux artifact's T4: models per type


def profiles_for(workload: str, cluster: Cluster) -> Artifact:
    """Whose job models a simulation runs: the Sia artifact's (per GPU type, with its calibration and restore
    delays) for its own workloads and for any cluster with a type besides the T4 (`aws`) the Pollux artifact
    measured on; the Pollux artifact's otherwise (docs/design.md, "Job models per GPU type")."""
    if workload_artifact(workload) == SIA_DATASET or set(cluster.gpu_types) != {DEFAULT_GPU_TYPE}:
        return SIA_DATASET
    return DATASET


def resolve_inputs(
    workload: str, data_dir: Path | None, seed: int, allow_offline: bool = True, cluster: Cluster | None = None
) -> tuple[SimInputs, str]:
    """Measured profiles and the named workload when the data is there; else (for an artifact name, not a file)
    the parametric catalog with a generated workload. Returns the inputs and a line saying which."""
    from pollux.data.locate import find_data_dir

    cluster = cluster or Cluster()
    profiles = profiles_for(workload, cluster)
    typed = profiles == SIA_DATASET
    try:
        location = find_data_dir(data_dir, artifact=profiles)
    except DataNotFoundError as error:
        if Path(workload).is_file() or not allow_offline:
            raise
        note = (
            f"No artifact data ({error}). Running on the parametric job catalog with a generated workload "
            f"({OFFLINE_JOBS} jobs over {OFFLINE_HOURS:g} h, seed {seed}) instead of {workload}."
        )
        return SimInputs(workload, None, True, seed, profiles, typed), note
    what = "Job profiles per GPU type (Sia artifact)" if typed else "Job profiles"
    return SimInputs(workload, location.path, False, seed, profiles, typed), f"{what} from {location.path}"


def load_inputs(inputs: SimInputs) -> tuple[dict[str, JobModel | TypedJobModel], Workload]:
    """(models, workload) for `inputs`; runs in each worker process."""
    models: dict[str, JobModel | TypedJobModel]
    if inputs.offline:
        from pollux.sim.generate import generate_workload
        from pollux.sim.parametric import load_catalog, load_typed_catalog

        models = dict(load_typed_catalog()) if inputs.typed else dict(load_catalog())
        return models, generate_workload(OFFLINE_JOBS, OFFLINE_HOURS, inputs.seed, source="summary")
    from pollux.sim.measured import load_measured_models
    from pollux.sim.typed import load_typed_models
    from pollux.sim.workload import read_workload

    if inputs.typed:
        models = dict(load_typed_models(inputs.profiles, inputs.data_dir, pipelines=True))
    else:
        models = dict(load_measured_models(inputs.data_dir))
    same_artifact = workload_artifact(inputs.workload) in (None, inputs.profiles)
    workload = read_workload(inputs.workload, inputs.data_dir if same_artifact else None, applications=models)
    return models, workload


def run_policy(policy_name: str, inputs: SimInputs, config: SimConfig, progress=None) -> SimResult:
    """Simulate one policy; `progress` (a queue) receives (policy, finished, total) after each round."""
    from pollux.sim.run import simulate, simulated_policy

    models, workload = load_inputs(inputs)
    policy = simulated_policy(policy_name, config, models, inputs.data_dir)
    report = None
    if progress is not None:
        report = lambda now, done, total: progress.put((policy_name, done, total))  # noqa: E731
    return simulate(workload.jobs, policy, models, config, on_round=report)


def _make_out_dir(out: Path) -> None:
    """Create --out before simulating: a path that cannot be a folder would otherwise fail after every run."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PolluxError(f"--out {out}: cannot create the folder ({error.strerror}); pass a folder path") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise PolluxError(f"--out {out}: the folder is not writable; pass one you may write to")


TENANT_PEERS = ("astraea",)  # schedulers of tenants' fairness: by default only where there are tenants
NAMED_PEERS = ("themis", "shockwave")  # the Sia paper's Table 4 peers beyond Gavel: run only when named (`-p themis`)


def default_policies(cluster: Cluster, tenants: bool = False) -> list[str]:
    """Every registered policy; on a cluster of one GPU type not `pollux-unaware`, which decides as `pollux` there;
    `astraea`, a scheduler for fairness between tenants, only with a tenants file; `themis` and `shockwave` only when
    named (so a run without them stays as it was)."""
    from pollux.policies.registry import POLICIES

    return [
        name
        for name in POLICIES
        if (cluster.heterogeneous or name != "pollux-unaware")
        and (tenants or name not in TENANT_PEERS)
        and name not in NAMED_PEERS
    ]


def chosen_cluster(cluster: str | None, nodes: int | None, gpus_per_node: int | None) -> Cluster:
    """The cluster the options name: `--cluster` (preset or file), else the uniform `aws` cluster that
    `--nodes`/`--gpus-per-node` describe (16 × 4 when neither is given: the `pollux-artifact` preset)."""
    if cluster is None:
        default = PRESETS[DEFAULT_PRESET]
        return Cluster(
            default.num_nodes if nodes is None else nodes,
            default.gpus_per_node if gpus_per_node is None else gpus_per_node,
            DEFAULT_GPU_TYPE,
        )
    given = [flag for flag, value in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node)) if value is not None]
    if given:
        raise PolluxError(
            f"--cluster and {' and '.join(given)} both describe the cluster; give --cluster alone (a preset or file), "
            "or --nodes/--gpus-per-node alone for a uniform aws cluster"
        )
    return load_cluster(cluster)


def chosen_autoscale(
    cluster: Cluster, min_nodes: int | None, max_nodes: int | None, boot_time: int
) -> AutoscaleSettings | None:
    """Autoscaling between `--min-nodes` (default 1) and `--max-nodes` (default the cluster's nodes) when either is
    given; None (a fixed cluster) otherwise. Refused before anything starts: a maximum below the minimum, a cluster
    of several GPU types, and `--boot-time` without autoscaling."""
    from pollux.autoscale import AutoscaleSettings

    if min_nodes is None and max_nodes is None:
        if boot_time:
            raise PolluxError("--boot-time applies to autoscaled clusters: add --min-nodes/--max-nodes, or drop it")
        return None
    if cluster.heterogeneous:
        raise PolluxError(
            f"--min-nodes/--max-nodes autoscale a cluster of one GPU type; {cluster.describe()} has "
            f"{len(cluster.gpu_types)}: pick a one-type --cluster, or --nodes/--gpus-per-node"
        )
    low = 1 if min_nodes is None else min_nodes
    high = max_nodes if max_nodes is not None else cluster.num_nodes
    if high < low:
        given = f"--max-nodes {high}" if max_nodes is not None else f"--max-nodes (default: the cluster's {high} nodes)"
        raise PolluxError(f"{given} is below --min-nodes {low}; give --max-nodes >= --min-nodes")
    return AutoscaleSettings(low, high)


def table_width(results: list[SimResult]) -> int:
    """The printed table's least width: 120 characters, and the room of each column beyond the base table's (Sia's
    fairness, nodes, tenants), so the columns a run adds cut no header of the others short."""
    from pollux.sim.table import COLUMNS, columns_of

    added = columns_of(results)[len(COLUMNS) : -1]  # between the base columns and wall s
    return 120 + sum(len(column.label) + 3 for column in added)


def summary_table(results: list[SimResult], title: str) -> Table:
    """The comparison table (`pollux.sim.table`), what each column means in its caption."""
    from rich.table import Table

    from pollux.sim.table import columns_of, in_table_order

    columns = columns_of(results)
    caption = "\n".join(f"{c.label}: {c.meaning}" for c in columns)
    table = Table(title=title, caption=caption, caption_justify="left")
    table.add_column("policy", no_wrap=True, min_width=16)
    for column in columns:
        table.add_column(column.label, justify="right")
    for result in in_table_order(results):
        table.add_row(result.policy, *(column.cell(result) for column in columns))
    return table


def group_table(results: list[SimResult], group: Literal["tenant", "experiment"]) -> Table:
    """One row per policy and tenant (`group` "tenant", `pollux.sim.table.tenant_rows`) or experiment ("experiment",
    `experiment_rows`), each policy's in a section of their own, the policy named once: a screen for 20 tenants of
    one policy."""
    from rich.table import Table

    from pollux.sim.table import EXPERIMENT_TABLE, TENANT_TABLE, experiment_rows, tenant_rows

    columns, rows = (
        (TENANT_TABLE, tenant_rows(results)) if group == "tenant" else (EXPERIMENT_TABLE, experiment_rows(results))
    )
    caption = "\n".join(f"{c.label}: {c.meaning}" for c in columns)
    table = Table(title=f"{group.capitalize()}s", caption=caption, caption_justify="left")
    table.add_column("policy", no_wrap=True, min_width=16)
    table.add_column(group, no_wrap=True)
    for column in columns:
        table.add_column(column.label, justify="right")
    for i, (policy, name, cells) in enumerate(rows):
        first = i == 0 or rows[i - 1][0] != policy
        last = i + 1 == len(rows) or rows[i + 1][0] != policy
        table.add_row(policy if first else "", name, *cells, end_section=last)
    return table


def chosen_tenants(path: Path | None, cluster: Cluster, autoscaled: bool) -> Tenants | None:
    """The tenants of `--tenants` (`pollux.tenants.read_tenants`), checked against the cluster; refused with
    autoscaling, whose capacity (and so every guarantee's footing) changes from round to round."""
    if path is None:
        return None
    if autoscaled:
        raise PolluxError("--tenants needs a fixed cluster: drop --min-nodes/--max-nodes, or drop --tenants")
    from pollux.tenants import read_tenants

    return read_tenants(path, cluster)


def simulate_command(
    workload: Annotated[
        str, typer.Argument(help="CSV path, or an artifact name such as workload-1.")
    ] = DEFAULT_WORKLOAD,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            "-p",
            metavar="NAME",
            help="Repeat for several; default: all (pollux-unaware: typed clusters only).",
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help=f"A preset ({', '.join(PRESETS)}) or a TOML file of node groups (gpu_type, num_nodes, gpus_per_node); "
            f"NAME:Kx has K times its nodes (sia-heterogeneous:32x). Default: {DEFAULT_PRESET}.",
        ),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(help="Nodes of a uniform aws cluster, instead of --cluster (default 16).", callback=bounds(1)),
    ] = None,
    gpus_per_node: Annotated[
        int | None, typer.Option(help="GPUs on each of its nodes (default 4).", callback=bounds(1))
    ] = None,
    interval: Annotated[
        int, typer.Option(help="Seconds between scheduling rounds.", callback=bounds(1))
    ] = ROUND_INTERVAL_S,
    restart_delay: Annotated[
        int, typer.Option(help="Seconds lost at every (re)start.", callback=bounds(0))
    ] = RESTART_DELAY_S,
    interference: Annotated[
        float,
        typer.Option(help="Slowdown of distributed jobs sharing a node, 0-1.", callback=bounds(0, 1, high_open=True)),
    ] = 0.0,
    lease: Annotated[
        float | None,
        typer.Option(
            help="Seconds a job started or moved trains, after its restore, before any policy may move it "
            "(default: none, the paper's Pollux).",
            callback=bounds(0),
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of workloads and searches.", callback=bounds(0))] = 0,
    out: Annotated[Path, typer.Option(help="Folder for summary.json, CSVs and plots.")] = Path("results/simulate"),
    processes: Annotated[int, typer.Option(help="Policies simulated at once.", callback=bounds(1))] = 2,
    min_nodes: Annotated[
        int | None,
        typer.Option(help="Autoscale: fewest nodes (default 1 when --max-nodes is given).", callback=bounds(1)),
    ] = None,
    max_nodes: Annotated[
        int | None,
        typer.Option(help="Autoscale: most nodes (default the cluster's nodes).", callback=bounds(1)),
    ] = None,
    boot_time: Annotated[
        int, typer.Option(help="Autoscale: seconds before a node added can be used.", callback=bounds(0))
    ] = 0,
    data_dir: Annotated[Path | None, typer.Option(help="Artifact data folder.")] = None,
    tenants: Annotated[
        Path | None,
        typer.Option(
            help="A TOML file of [[tenant]] tables (name, weight, guaranteed, max, borrow): every policy runs under "
            "their GPU quotas, and the results are measured per tenant. Default: one tenant owning everything.",
        ),
    ] = None,
) -> None:
    """Replay a workload under each policy and compare them. A table on screen; the summary, CSVs, plots and an
    HTML report in --out."""
    from pollux.lease import Lease
    from pollux.policies.registry import POLICIES, policy_class
    from pollux.sim.progress import run_policies
    from pollux.sim.report import write_outputs
    from pollux.sim.run import SimConfig, check_policy_runs, check_workload_fits

    console = plain_console()
    chosen = chosen_cluster(cluster, nodes, gpus_per_node)
    autoscale = chosen_autoscale(chosen, min_nodes, max_nodes, boot_time)
    held = None if lease is None else Lease(lease, float(restart_delay))
    teams = chosen_tenants(tenants, chosen, autoscale is not None)
    config = SimConfig(chosen, interval, restart_delay, interference, autoscale, float(boot_time), held, teams)
    names = policy or default_policies(config.cluster, config.tenants is not None)
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise PolluxError(f"unknown policy {unknown[0]!r}; choose from: {', '.join(POLICIES)}")
    inputs, note = resolve_inputs(workload, data_dir, seed, cluster=config.cluster)
    models, loaded = load_inputs(inputs)  # a missing, malformed or too large workload is refused before any bar
    check_workload_fits(loaded.jobs, models, config.largest_cluster(), config.tenants)
    for name in names:
        check_policy_runs(loaded.jobs, models, policy_class(name))
    _make_out_dir(out)
    console.print(note, soft_wrap=True)
    results = run_policies(names, inputs, config, processes, console)
    where, num_gpus = f"{config.cluster.describe()} ({config.cluster.num_gpus} GPUs)", config.cluster.num_gpus
    if autoscale is not None:
        kind = config.cluster.groups[0]
        where = f"{autoscale.min_nodes}-{autoscale.max_nodes} × {kind.gpus_per_node} {kind.gpu_type} (autoscaled)"
        num_gpus = autoscale.max_nodes * kind.gpus_per_node  # the most it may have
    title = f"{workload if not inputs.offline else 'generated workload'} on {where}"
    paths = write_outputs(results, out, title, num_gpus)
    wide = plain_console(width=max(console.width, table_width(results)))
    wide.print(summary_table(results, title))
    if config.tenants is not None:
        wide.print(group_table(results, "tenant"))
    if any(result.experiments for result in results):
        wide.print(group_table(results, "experiment"))
    plots = ", ".join(p.name for p in paths if p.suffix == ".png")
    console.print(f"Wrote {len(paths)} files to {out}/ — plots: {plots}; open {out}/report.html", soft_wrap=True)

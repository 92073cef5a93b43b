"""`pollux workload generate | scenario | show`: make a workload CSV the way the artifact did (with tenants: Philly's
virtual clusters, or a named scenario such as `flood`), or check and summarize one.

Mounted by `pollux/cli.py` as `pollux workload ...`; also runnable alone as `python -m pollux.sim.workload_cli`.
Exit codes: 0 fine; 2 a `PolluxError` (one line on stderr, no traceback).
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pollux.cli_app import CliApp, examples
from pollux.defaults import GENERATE_START_HOUR
from pollux.errors import DataNotFoundError, PolluxError
from pollux.option_bounds import bounds

if TYPE_CHECKING:
    from pollux.cluster import Cluster
    from pollux.sim.tenant_workloads import TenantWorkload

app = CliApp(
    name="workload",
    help="Generate and check workloads (job arrivals and requests).",
    epilog=examples(
        "pollux workload generate --jobs 160 --hours 8",
        "pollux workload scenario flood --seed 1",
        "pollux workload show workload-1",
    ),
)

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Artifact data folder", show_default="search"),
]


ClusterOption = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help="The cluster the tenants' guarantees are cut from: a preset or a TOML file of node groups",
        show_default="16 × 4 aws",
    ),
]
NodesOption = Annotated[
    int | None, typer.Option("--nodes", help="Nodes of a uniform aws cluster, instead of --cluster", callback=bounds(1))
]
GpusPerNodeOption = Annotated[
    int | None, typer.Option("--gpus-per-node", help="GPUs on each of its nodes", callback=bounds(1))
]
TenantsOutOption = Annotated[
    Path | None,
    typer.Option("--tenants-out", help="Tenants TOML to write", show_default="<out>.tenants.toml"),
]


class TenantsChoice(StrEnum):
    """Where each job's tenant comes from."""

    philly = "philly"


class ScenarioChoice(StrEnum):
    """Named workloads with tenants (`pollux.sim.tenant_workloads`)."""

    flood = "flood"


class SourceChoice(StrEnum):
    """Where job arrivals and sizes come from (`generate_workload`'s `source`)."""

    auto = "auto"
    trace = "trace"
    summary = "summary"


@app.callback()
def _workload() -> None:
    """Generate and check workloads (job arrivals and requests)."""


@app.command(
    "generate",
    epilog=examples(
        "pollux workload generate --jobs 160 --hours 8 --seed 1",
        "pollux workload generate -n 160 --hours 8 --tenants philly",
    ),
)
def generate_command(
    jobs: Annotated[int, typer.Option("--jobs", "-n", help="Jobs at load 1.0", callback=bounds(1))],
    hours: Annotated[
        float,
        typer.Option(
            "--hours", help="Submission window length, hours (at most 24)", callback=bounds(0, 24, low_open=True)
        ),
    ],
    seed: Annotated[
        int,
        typer.Option(
            "--seed",
            help="Seed: the same seed gives the same jobs",
            callback=bounds(0),
        ),
    ] = 0,
    load: Annotated[
        float,
        typer.Option("--load", help="Scales the number of jobs in the same window", callback=bounds(0, low_open=True)),
    ] = 1.0,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="CSV to write", show_default="./generated-<N>jobs-<H>h-seed<S>.csv"),
    ] = None,
    data_dir: DataDirOption = None,
    start_hour: Annotated[
        int,
        typer.Option("--start-hour", help="Hour of the trace's day where the window starts", callback=bounds(0, 23)),
    ] = GENERATE_START_HOUR,
    source: Annotated[
        SourceChoice,
        typer.Option(
            "--source",
            metavar="SOURCE",
            help="trace, summary, or auto: the Philly trace when found, else the committed summary",
        ),
    ] = SourceChoice.auto,
    tenants: Annotated[
        TenantsChoice | None,
        typer.Option(
            "--tenants",
            metavar="FROM",
            help="philly: each job's tenant is its trace job's virtual cluster (a tenant column), and a tenants "
            "file guarantees each VC its share of the GPU-time",
        ),
    ] = None,
    tenants_out: TenantsOutOption = None,
    cluster: ClusterOption = None,
    nodes: NodesOption = None,
    gpus_per_node: GpusPerNodeOption = None,
) -> None:
    """Sample a workload as the artifact did. Philly submission times, application by GPU-time, a tuned request
    each."""
    from pollux.sim.generate import generate_workload
    from pollux.sim.workload import write_workload

    if tenants is None:
        given = [flag for flag, value in _tenant_flags(tenants_out, cluster, nodes, gpus_per_node) if value is not None]
        if given:
            raise PolluxError(f"{given[0]} shapes the tenants file: add --tenants philly, or drop {given[0]}")
        workload = generate_workload(jobs, hours, seed, load, data_dir, start_hour=start_hour, source=source.value)
        path = write_workload(workload, out or Path(f"{workload.name}.csv"))
        typer.echo(f"wrote {len(workload)} jobs to {path}, sampled from {_origin(workload.source, source, data_dir)}")
        return
    from pollux.sim.tenant_workloads import philly_vc_workload

    if source is SourceChoice.summary:
        raise PolluxError("--tenants philly takes each job's VC from the Philly trace: drop --source summary")
    chosen = philly_vc_workload(
        jobs, hours, seed, _cluster(cluster, nodes, gpus_per_node), load, data_dir, start_hour=start_hour
    )
    _write_with_tenants(chosen, out, tenants_out, f"sampled from {_origin(chosen.workload.source, source, data_dir)}")


@app.command(
    "scenario",
    epilog=examples("pollux workload scenario flood --seed 1", "pollux workload scenario flood --out flood.csv"),
)
def scenario_command(
    name: Annotated[
        ScenarioChoice,
        typer.Argument(
            metavar="NAME",
            help="flood: tenant a submits 100 jobs at time 0, tenant b 10 over the first two hours; each is "
            "guaranteed half of every GPU type",
        ),
    ],
    seed: Annotated[
        int, typer.Option("--seed", help="Seed: the same seed gives the same jobs", callback=bounds(0))
    ] = 0,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="CSV to write", show_default="./<NAME>-seed<S>.csv")
    ] = None,
    tenants_out: TenantsOutOption = None,
    cluster: ClusterOption = None,
    nodes: NodesOption = None,
    gpus_per_node: GpusPerNodeOption = None,
    data_dir: DataDirOption = None,
    source: Annotated[
        SourceChoice,
        typer.Option(
            "--source", metavar="SOURCE", help="Where the job mix is drawn from, as for generate (trace, summary, auto)"
        ),
    ] = SourceChoice.auto,
) -> None:
    """Write a named workload and its tenants file. The CSV has a tenant column; its jobs are drawn as generate
    draws them."""
    from pollux.sim.tenant_workloads import flood_workload

    chosen = flood_workload(seed, _cluster(cluster, nodes, gpus_per_node), data_dir, source=source.value)
    _write_with_tenants(chosen, out, tenants_out, f"drawn from {_origin(chosen.workload.source, source, data_dir)}")


def _tenant_flags(*values: object) -> list[tuple[str, object]]:
    """The options that only shape a tenants file, with their values."""
    return list(zip(("--tenants-out", "--cluster", "--nodes", "--gpus-per-node"), values, strict=True))


def _cluster(cluster: str | None, nodes: int | None, gpus_per_node: int | None) -> Cluster:
    """The cluster the options name, as `pollux simulate` reads them (default: the 16 × 4 T4 artifact cluster)."""
    from pollux.sim.cli import chosen_cluster

    return chosen_cluster(cluster, nodes, gpus_per_node)


def _write_with_tenants(chosen: TenantWorkload, out: Path | None, tenants_out: Path | None, origin: str) -> None:
    """The CSV with its tenant column, then its tenants file beside it (`<out>.tenants.toml` unless named)."""
    from pollux.sim.tenant_workloads import write_tenants
    from pollux.sim.workload import write_workload

    path = write_workload(chosen.workload, out or Path(f"{chosen.workload.name}.csv"))
    toml = write_tenants(chosen, tenants_out or path.with_suffix(".tenants.toml"))
    typer.echo(f"wrote {len(chosen.workload)} jobs to {path}, {origin}")
    guaranteed = sum(sum(t.guaranteed.values()) for t in chosen.tenants.tenants)
    typer.echo(f"wrote {len(chosen.tenants.tenants)} tenants ({guaranteed} GPUs guaranteed in all) to {toml}")


def _origin(sampled: Path | None, source: SourceChoice, data_dir: Path | None) -> str:
    """Which file the jobs were sampled from, and why not the trace when it was not."""
    from pollux.data.philly import SUMMARY_PATH

    if sampled == SUMMARY_PATH:
        origin = f"the committed Philly summary {SUMMARY_PATH.name}"
        if source is SourceChoice.auto:
            origin += f" (no trace: {_why_no_trace(data_dir)})"
        return origin
    return f"the Philly trace {sampled}"


@app.command("show", epilog=examples("pollux workload show workload-1", "pollux workload show my-trace.csv"))
def show_command(
    workload: Annotated[str, typer.Argument(help="CSV path, or artifact name: workload-1, workloads-2.0/workload-3")],
    data_dir: DataDirOption = None,
) -> None:
    """Check a workload and print its size, span and job mix."""
    from pollux.sim.workload import read_workload

    loaded = read_workload(workload, data_dir)
    times = [job.submit_time_s for job in loaded.jobs]
    typer.echo(f"{loaded.name}: {len(loaded)} jobs from {loaded.source}")
    typer.echo(f"submitted between {min(times)} s and {max(times)} s ({max(times) / 3600:.2f} h)")
    mix = Counter((job.application, job.num_replicas, job.batch_size) for job in loaded.jobs)
    typer.echo(f"{'application':<14}{'GPUs':>6}{'batch':>8}{'jobs':>7}")
    for (application, replicas, batch), count in sorted(mix.items()):
        typer.echo(f"{application:<14}{replicas:>6}{batch:>8}{count:>7}")


def _why_no_trace(data_dir: Path | None) -> str:
    """The reason the trace was not used, for the one-line report."""
    from pollux.sim.generate import find_philly_trace

    try:
        find_philly_trace(data_dir)
    except DataNotFoundError as err:
        return " ".join(str(err).split(";")[0].split())
    return "not requested"


if __name__ == "__main__":
    app()

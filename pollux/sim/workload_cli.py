"""`pollux workload generate | show`: make a workload CSV the way the artifact did, or check and summarize one.

Mounted by `pollux/cli.py` as `pollux workload ...`; also runnable alone as `python -m pollux.sim.workload_cli`.
Exit codes: 0 fine; 2 a `PolluxError` (one line on stderr, no traceback).
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from pollux.cli_app import CliApp, examples
from pollux.defaults import GENERATE_START_HOUR
from pollux.errors import DataNotFoundError
from pollux.option_bounds import bounds

app = CliApp(
    name="workload",
    help="Generate and check workloads (job arrivals and requests).",
    epilog=examples("pollux workload generate --jobs 160 --hours 8", "pollux workload show workload-1"),
)

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Artifact data folder", show_default="search"),
]


class SourceChoice(StrEnum):
    """Where job arrivals and sizes come from (`generate_workload`'s `source`)."""

    auto = "auto"
    trace = "trace"
    summary = "summary"


@app.callback()
def _workload() -> None:
    """Generate and check workloads (job arrivals and requests)."""


@app.command("generate", epilog=examples("pollux workload generate --jobs 160 --hours 8 --seed 1"))
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
) -> None:
    """Sample a workload as the artifact did. Philly submission times, application by GPU-time, a tuned request
    each."""
    from pollux.data.philly import SUMMARY_PATH
    from pollux.sim.generate import generate_workload
    from pollux.sim.workload import write_workload

    workload = generate_workload(jobs, hours, seed, load, data_dir, start_hour=start_hour, source=source.value)
    path = write_workload(workload, out or Path(f"{workload.name}.csv"))
    if workload.source == SUMMARY_PATH:
        origin = f"the committed Philly summary {SUMMARY_PATH.name}"
        if source is SourceChoice.auto:
            origin += f" (no trace: {_why_no_trace(data_dir)})"
    else:
        origin = f"the Philly trace {workload.source}"
    typer.echo(f"wrote {len(workload)} jobs to {path}, sampled from {origin}")


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

"""`pollux` command line. Errors from bad input print one line and exit 2; bugs keep their traceback.

Every command's module is cheap to import (numpy, scipy, pydantic, the HTTP stack and the simulator are imported
inside the commands that use them): `pollux --help` and `pollux ls` answer in a fraction of a second
(`python -m benchmarks.cli_speed`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pollux.cli_app import CliApp, examples
from pollux.console import plain_console
from pollux.data.cli import app as data_app
from pollux.runtime.cli import register as register_runtime
from pollux.runtime.spec_cli import app as spec_app
from pollux.runtime.tenant_cli import app as tenant_app
from pollux.sim.cli import simulate_command
from pollux.sim.workload_cli import app as workload_app

app = CliApp(help="Pollux: goodput-optimized scheduling of deep-learning training jobs.")


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import version

        typer.echo(f"pollux {version('pollux')}")
        raise typer.Exit()


@app.callback(epilog=examples("pollux simulate workload-1", "pollux up", "pollux submit job.toml", "pollux ls"))
def _pollux(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit.", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    """Pollux: goodput-optimized scheduling of deep-learning training jobs."""


app.command(
    "simulate",
    epilog=examples("pollux simulate", "pollux simulate workload-1 -p pollux -p tiresias --out results/w1"),
)(simulate_command)
register_runtime(app)
app.add_typer(data_app, name="data")
app.add_typer(workload_app, name="workload")
app.add_typer(spec_app, name="spec")
app.add_typer(tenant_app, name="tenant")

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Artifact data folder (else POLLUX_DATA_DIR, ../shared, cache)."),
]


@app.command(epilog=examples("pollux fit", "pollux fit --data-dir ~/data/pollux-osdi21"))
def fit(data_dir: DataDirOption = None) -> None:
    """Fit the throughput model to every real job profile. Prints how well it fits each, and extrapolates."""
    from rich.table import Table
    from rich.text import Text

    from pollux.calibration import fit_profile
    from pollux.data.locate import find_data_dir
    from pollux.data.profiles import MODELS, load_profile

    console = plain_console()
    location = find_data_dir(data_dir)
    console.print(Text.assemble("Job profiles from ", (str(location.path), "bold"), f" ({location.source})"))
    table = Table(title="Throughput model fitted to measured step times (RMSLE: root-mean-squared log error)")
    for column in ("model", "samples", "step RMSLE", "compute RMSLE", "multi-node RMSLE*", "γ"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for model in MODELS:
        report = fit_profile(load_profile(model, location.path))
        table.add_row(
            model,
            str(report.num_samples),
            f"{report.step_rmsle:.3f}",
            f"{report.compute_rmsle:.3f}",
            f"{report.multi_node_rmsle:.3f}",
            f"{report.params.gamma:.2f}",
        )
    console.print(table)
    console.print("* fitted on single-node rows only, scored on multi-node rows: how well it extrapolates.")


def main() -> None:
    """Console-script entry point (errors: `pollux.console.OneLineErrors`)."""
    app()

"""`pollux` command line. Errors from bad input print one line and exit 2; bugs keep their traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from pollux.console import OneLineErrors, plain_console
from pollux.data.cli import app as data_app
from pollux.runtime.cli import register as register_runtime
from pollux.runtime.spec_cli import app as spec_app
from pollux.sim.cli import simulate_command
from pollux.sim.workload_cli import app as workload_app

app = typer.Typer(
    help="Pollux: goodput-optimized scheduling of deep-learning training jobs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=OneLineErrors,
)
app.add_typer(data_app, name="data", help="Find, fetch and verify the Pollux artifact's data.")
app.add_typer(workload_app, name="workload", help="Generate and inspect workload traces.")
app.add_typer(spec_app, name="spec", help="Job specs: `pollux spec schema` prints their JSON Schema, for editors.")
app.command("simulate")(simulate_command)
register_runtime(app)

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Artifact data folder (else POLLUX_DATA_DIR, ../shared, cache)."),
]


@app.command()
def fit(data_dir: DataDirOption = None) -> None:
    """Fit the throughput model to every real job profile and print how well it fits."""
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

"""`pollux spec schema`: the job spec's JSON Schema, so an editor completes and checks a job.toml as it is typed.

    pollux spec schema > job.schema.json
    # then on the first line of job.toml (taplo, Even Better TOML):  #:schema ./job.schema.json

Mounted by `pollux/cli.py` as `pollux spec ...`.
"""

from __future__ import annotations

import json
import sys

import typer

from pollux.console import OneLineErrors

app = typer.Typer(
    name="spec", help="Job specs (the TOML given to `pollux submit`).", no_args_is_help=True, cls=OneLineErrors
)


@app.command()
def schema() -> None:
    """Print the JSON Schema of a job spec (for editors: `#:schema ./job.schema.json` atop a job.toml)."""
    from pollux.runtime.spec import json_schema

    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")

"""`pollux spec`: the job spec's format in its help, and `pollux spec schema`, its JSON Schema, so an editor completes
and checks a job.toml as it is typed.

    pollux spec schema > job.schema.json
    # then on the first line of job.toml (taplo, Even Better TOML):  #:schema ./job.schema.json

Mounted by `pollux/cli.py` as `pollux spec ...`.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pollux.cli_app import CliApp, CliGroup, examples

# A small spec, shown in `pollux spec --help` (and read back by the tests: it must stay valid).
EXAMPLE_SPEC = """\
name = "digits"
command = ["python", "train.py", "--epochs", "3"]
init_batch_size = 64
max_batch_size = 1024
local_bsz_bounds = [16, 256]
max_gpus = 4"""


class SpecHelp(CliGroup):
    """`pollux spec --help` lists the spec's fields from the model itself (`pollux.runtime.spec.json_schema`), so
    the list cannot drift from what `pollux submit` accepts; pydantic is imported only when that help is printed."""

    def format_epilog(self, ctx: Any, formatter: Any) -> None:  # typer's own (vendored) click types
        from pollux.runtime.spec import json_schema

        schema = json_schema()
        rows = [
            (f"{name} *" if name in schema["required"] else name, field.get("description", ""))
            for name, field in schema["properties"].items()
        ]
        with formatter.section("Fields of a job spec (* required)"):
            formatter.write_dl(rows)
        formatter.write_paragraph()
        with formatter.indentation():
            lines = [f"  {line}" for line in EXAMPLE_SPEC.splitlines()]
            formatter.write_text("\n".join(["A job.toml:", "", "\b", *lines]))
        super().format_epilog(ctx, formatter)


app = CliApp(
    name="spec",
    help="Job specs: the TOML file given to `pollux submit`. Its fields are below; relative paths in a spec are "
    "relative to its file.",
    cls=SpecHelp,
    epilog=examples("pollux submit job.toml", "pollux spec schema > job.schema.json"),
)


@app.command(epilog=examples("pollux spec schema > job.schema.json"))
def schema() -> None:
    """Print the JSON Schema of a job spec. For editors: `#:schema ./job.schema.json` atop a job.toml."""
    from pollux.runtime.spec import json_schema

    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")

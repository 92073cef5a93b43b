"""One error hierarchy and one command-line handler: input errors are one line and exit 2, bugs keep a traceback."""

from __future__ import annotations

import ast
from pathlib import Path

import typer
from typer.testing import CliRunner

from pollux import errors
from pollux.console import OneLineErrors
from pollux.errors import AllocationError, PolluxError, SpecError

PACKAGE = Path(errors.__file__).parent


def test_every_error_class_lives_in_pollux_errors() -> None:
    elsewhere = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and (base.id.endswith("Error") or base.id == "Exception")
                for base in node.bases
            ):
                elsewhere.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
    assert elsewhere == []


def app_raising(error: Exception) -> typer.Typer:
    app = typer.Typer(cls=OneLineErrors)

    @app.command()
    def boom() -> None:
        raise error

    @app.command()
    def fine() -> None:
        typer.echo("ok")

    return app


def test_an_input_error_from_any_command_is_one_line_and_exit_2() -> None:
    message = "job.toml: field 'gpus': 9 exceeds max_gpus 4; lower gpus or raise max_gpus [see docs]"
    result = CliRunner().invoke(app_raising(SpecError(message)), ["boom"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert result.output.strip() == f"error: {message}"  # literally, brackets included


def test_a_policy_bug_keeps_its_traceback() -> None:
    bug = AllocationError("node 3: 9 GPUs allocated, 8 exist")
    assert not isinstance(bug, PolluxError)
    result = CliRunner().invoke(app_raising(bug), ["boom"])
    assert result.exception is bug and result.exit_code == 1  # propagated, not turned into a one-liner
    assert "error:" not in result.output

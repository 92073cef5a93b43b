"""The command line's help reads whole at 80 columns, with an example for every command; `--version`; and the help
and client commands start without the heavy libraries (what keeps `pollux --help` well under 0.3 s: timed by
`python -m benchmarks.cli_speed`, not here)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest
import typer.main
from typer.testing import CliRunner

from pollux.cli import app
from pollux.runtime.spec import json_schema, loads_spec
from pollux.runtime.spec_cli import EXAMPLE_SPEC
from pollux.runtime.store import StateStore


def command_paths() -> list[list[str]]:
    """Every command and group of `pollux`, as the words typed before `--help` ([] is `pollux` itself)."""
    paths: list[list[str]] = []

    def walk(command, path: list[str]) -> None:
        paths.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


def help_at_80(path: list[str]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", command_paths(), ids=lambda path: " ".join(["pollux", *path]))
def test_help_fits_80_columns_whole_with_an_example(path):
    text = help_at_80(path)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    assert "…" not in text, text  # nothing cut: not an option name, a default or a command's summary
    cut = [line for line in lines[1:] if line.endswith("...")]  # click ends a summary cut short with "..."
    assert not cut, text
    assert "<bool>" not in text, text
    assert "{" not in lines[0], text  # the usage line names arguments as SPEC or [JOB]
    assert "Example:" in text or "Examples:" in text, text
    example = lines[lines.index(next(line for line in lines if line.strip().startswith("Example"))) + 2]
    assert example.strip().startswith("pollux "), text


def test_every_command_is_checked():
    names = {" ".join(path) for path in command_paths()}
    assert {"", "simulate", "up", "submit", "ls", "spec", "spec schema", "workload generate", "data fetch"} <= names


def test_version_prints_the_installed_packages_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"pollux {version('pollux')}\n"


def test_spec_help_lists_every_field_and_a_valid_example(tmp_path):
    text = help_at_80(["spec"])
    fields = text.split("Fields of a job spec")[1].splitlines()[1:]
    listed = {line.split()[0] for line in fields if line.startswith("  ") and line[2] != " "}
    assert set(json_schema()["properties"]) <= listed, text
    assert all(line in text for line in EXAMPLE_SPEC.splitlines()), text
    (tmp_path / "train.py").write_text("")
    spec = loads_spec(EXAMPLE_SPEC, "example", tmp_path)
    assert spec.name == "digits" and spec.local_bsz_bounds == (16, 256)


def test_submit_help_says_where_the_spec_format_is():
    assert "pollux spec --help" in help_at_80(["submit"])


def test_an_option_of_the_wrong_type_is_clicks_usage_error():
    result = CliRunner().invoke(app, ["down", "--timeout", "soon"])
    assert result.exit_code == 2
    assert "Invalid value for '--timeout': 'soon' is not a valid number" in result.output


HEAVY = ("numpy", "scipy", "pydantic", "starlette", "uvicorn", "requests", "matplotlib", "torch")


def imported_by(*args: str) -> set[str]:
    """The top-level packages a fresh `pollux ARGS` imports (python -X importtime, as a user runs it)."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pollux", *args], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr[-2000:]
    names = [line.split("|")[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")]
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("args", [["--help"], ["ls", "--help"], ["simulate", "--help"], ["submit", "--help"]])
def test_help_imports_no_heavy_library(args):
    assert imported_by(*args).isdisjoint(HEAVY)


def test_ls_of_an_empty_state_dir_imports_no_scheduler_or_numerics(tmp_path):
    StateStore(tmp_path / "state.db").close()
    imported = imported_by("ls", "--state-dir", str(tmp_path))
    assert imported.isdisjoint({"scipy", "starlette", "uvicorn", "requests", "matplotlib", "torch"}), imported

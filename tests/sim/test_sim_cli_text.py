"""The simulator's and the data commands print paths, messages and help as written: brackets are not rich markup."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pollux.cli import app

REPO = Path(__file__).resolve().parents[2]
HEADER = "name,time,application,num_replicas,batch_size\n"


def simulate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real entry point in a child process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "pollux", "simulate", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_an_out_folder_with_brackets_is_named_literally(tmp_path, monkeypatch):
    empty = tmp_path / "empty-data"
    empty.mkdir()
    monkeypatch.setenv("POLLUX_DATA_DIR", str(empty))
    monkeypatch.setenv("POLLUX_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "runs[" / "v2]"  # `…/runs[/v2]`: a closing tag to rich
    result = simulate("workload-1", "-p", "fifo", "--processes", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"to {out}/" in result.stdout, result.stdout
    assert (out / "summary.json").is_file()


def test_a_malformed_workload_in_a_bracketed_folder_is_named_literally(tmp_path):
    folder = tmp_path / "traces[rank 0]"
    folder.mkdir()
    bad = folder / "bad.csv"
    bad.write_text(HEADER + "cifar10-0,-5,cifar10,1,128\n")
    result = simulate(str(bad), "-p", "fifo", "--out", str(tmp_path / "o"))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{bad}:2" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "command,default",
    [
        (["workload", "generate"], "./generated-<N>jobs-<H>h-seed<S>.csv"),
        (["workload", "show"], "search"),
        (["data", "fetch"], "the user cache"),
    ],
)
def test_help_keeps_defaults_written_in_brackets(command, default):
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert default in result.output, result.output

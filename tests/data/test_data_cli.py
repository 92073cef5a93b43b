"""`pollux data fetch | status`: what a person sees, and the exit codes (0 fine, 1 not verified, 2 error)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pollux.data.cli import app
from pollux.data.locate import REPO_ROOT, default_cache_dir
from pollux.data.verify import verify

runner = CliRunner()


@pytest.mark.usefixtures("no_shared")
def test_fetch_with_base_url_fills_the_empty_cache_and_status_then_finds_it(
    origin_server: tuple[str, list[str]],
) -> None:
    base_url, _ = origin_server
    assert not default_cache_dir().exists()

    fetched = runner.invoke(app, ["fetch", "--base-url", base_url])
    assert fetched.exit_code == 0, fetched.output
    assert "94/94 files match the manifest" in fetched.stdout
    assert verify(default_cache_dir()).ok

    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    assert "found by: cache" in status.stdout
    assert "verified: yes" in status.stdout


def test_status_names_the_shared_data_and_verifies_it(shared_data: Path) -> None:
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 0, result.output
    assert f"data:     {shared_data.resolve()}" in result.stdout
    assert "found by: shared" in result.stdout
    assert "verified: yes" in result.stdout


def test_status_of_a_damaged_copy_says_which_file_and_exits_1(
    origin_server: tuple[str, list[str]], tmp_path: Path
) -> None:
    base_url, _ = origin_server
    assert runner.invoke(app, ["fetch", "--dest", str(tmp_path / "copy"), "--base-url", base_url]).exit_code == 0
    (tmp_path / "copy" / "profiles/imagenet/validation-200.csv").unlink()

    result = runner.invoke(app, ["status", "--data-dir", str(tmp_path / "copy")])

    assert result.exit_code == 1
    assert "found by: --data-dir" in result.stdout
    assert "verified: NO" in result.stdout
    assert "1 missing: profiles/imagenet/validation-200.csv" in result.stdout


def one_line_error(result) -> str:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.output
    assert result.stdout == ""
    return lines[0]


@pytest.mark.usefixtures("no_shared")
def test_status_with_no_data_anywhere_is_one_line_naming_what_to_do() -> None:
    line = one_line_error(runner.invoke(app, ["status"]))
    assert "POLLUX_DATA_DIR" in line
    assert "pollux data fetch" in line


@pytest.mark.usefixtures("no_shared")
def test_fetch_with_no_data_and_no_network_is_one_line_naming_what_to_do(closed_port_url: str) -> None:
    line = one_line_error(runner.invoke(app, ["fetch", "--base-url", closed_port_url]))
    assert "POLLUX_DATA_DIR" in line
    assert "pollux data fetch" in line
    assert not default_cache_dir().exists()


def test_as_a_process_the_error_is_one_stderr_line_without_traceback(closed_port_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "POLLUX_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "pollux.data.cli", "fetch", "--base-url", closed_port_url],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "POLLUX_DATA_DIR" in done.stderr
    assert "pollux data fetch" in done.stderr

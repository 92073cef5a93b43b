"""`pollux data fetch | status`: what a person sees, for both artifacts, and the exit codes (0 fine, 1 not verified,
2 error)."""

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

    fetched = runner.invoke(app, ["fetch", "--artifact", "pollux-osdi21", "--base-url", base_url])
    assert fetched.exit_code == 0, fetched.output
    assert "94/94 files match the manifest" in fetched.stdout
    assert verify(default_cache_dir()).ok

    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    assert "found by: cache" in status.stdout
    assert "verified: yes" in status.stdout
    assert "sia-sosp23\n  data:     not found" in status.stdout
    assert "POLLUX_SIA_DATA_DIR" in status.stdout


@pytest.mark.usefixtures("no_shared")
def test_fetch_of_the_sia_artifact_fills_its_own_cache_and_status_reports_both(
    origin_server: tuple[str, list[str]], sia_origin_server: tuple[str, list[str]]
) -> None:
    for artifact, (base_url, _) in (("pollux-osdi21", origin_server), ("sia-sosp23", sia_origin_server)):
        fetched = runner.invoke(app, ["fetch", "--artifact", artifact, "--base-url", base_url])
        assert fetched.exit_code == 0, fetched.output
    assert "252/252 files match the manifest" in fetched.stdout
    assert verify(default_cache_dir("sia-sosp23"), artifact="sia-sosp23").ok

    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0, status.output
    assert status.stdout.count("found by: cache") == 2
    assert status.stdout.count("verified: yes") == 2
    assert f"cache:    {default_cache_dir('sia-sosp23')}" in status.stdout


def test_one_base_url_for_both_artifacts_is_refused(closed_port_url: str) -> None:
    result = runner.invoke(app, ["fetch", "--base-url", closed_port_url])
    assert result.exit_code == 2
    assert "--artifact" in result.output
    assert not default_cache_dir().exists()


def test_status_names_the_shared_data_of_both_artifacts_and_verifies_them(
    shared_data: Path, sia_shared_data: Path
) -> None:
    result = runner.invoke(app, ["status"])
    assert result.exit_code == 0, result.output
    assert f"pollux-osdi21\n  data:     {shared_data.resolve()}" in result.stdout
    assert f"sia-sosp23\n  data:     {sia_shared_data.resolve()}" in result.stdout
    assert result.stdout.count("found by: shared") == 2
    assert "verified: yes (94/94 files match the manifest)" in result.stdout
    assert "verified: yes (252/252 files match the manifest)" in result.stdout


def test_status_of_a_damaged_copy_says_which_file_and_exits_1(
    origin_server: tuple[str, list[str]], tmp_path: Path
) -> None:
    base_url, _ = origin_server
    fetch_args = ["fetch", "-a", "pollux-osdi21", "--dest", str(tmp_path / "copy"), "--base-url", base_url]
    assert runner.invoke(app, fetch_args).exit_code == 0
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
    assert "POLLUX_SIA_DATA_DIR" in line
    assert "pollux data fetch" in line


def test_status_of_a_sia_folder_that_is_not_there_is_an_error_naming_it(tmp_path: Path) -> None:
    line = one_line_error(runner.invoke(app, ["status", "--sia-data-dir", str(tmp_path / "typo")]))
    assert f"--data-dir {tmp_path / 'typo'} does not exist" in line
    assert "POLLUX_SIA_DATA_DIR" in line


@pytest.mark.usefixtures("no_shared")
def test_fetch_with_no_data_and_no_network_is_one_line_naming_what_to_do(closed_port_url: str) -> None:
    line = one_line_error(runner.invoke(app, ["fetch", "-a", "pollux-osdi21", "--base-url", closed_port_url]))
    assert "POLLUX_DATA_DIR" in line
    assert "pollux data fetch" in line
    assert not default_cache_dir().exists()


def test_as_a_process_the_error_is_one_stderr_line_without_traceback(closed_port_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "POLLUX_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "pollux.data.cli", "fetch", "-a", "sia-sosp23", "--base-url", closed_port_url],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "POLLUX_SIA_DATA_DIR" in done.stderr
    assert "pollux data fetch --artifact sia-sosp23" in done.stderr

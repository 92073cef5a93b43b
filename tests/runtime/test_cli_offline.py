"""`pollux ls` while no scheduler runs reads the jobs from the state database; a client that cannot read the token
says so instead of "no scheduler runs"."""

from __future__ import annotations

import pytest
from runtime_jobs import wait_for, write_spec
from test_cli_local import Up

from pollux.runtime.store import StateStore

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them


def test_ls_lists_the_stored_jobs_after_pollux_down(tmp_path, counter_job):
    state = tmp_path / "state"
    short = write_spec(counter_job.parent, "short", "--steps 3 --step-s 0.01")
    long = write_spec(counter_job.parent, "long", "--steps 100000 --step-s 0.05")
    up = Up(state, "--slots", "2", "--policy", "fifo", "--interval", "1")
    store = StateStore(state / "state.db")
    try:
        up.cli("submit", str(short))
        up.cli("submit", str(long))
        wait_for(lambda: store.job("short").status == "completed", 60, "the short job to complete")
        wait_for(lambda: store.job("long").status == "running", 60, "the long job to run")
    finally:
        store.close()
        up.down()
    listing = up.cli("ls")
    assert "not running" in listing.stderr, listing.stderr
    rows = {line.split()[0]: line for line in listing.stdout.splitlines() if line.split()[:1] in (["short"], ["long"])}
    assert "completed" in rows["short"], listing.stdout
    assert "pending" in rows["long"] and "scheduler shut down" in rows["long"], listing.stdout
    detail = up.cli("ls", "long")
    assert "not running" in detail.stderr
    assert "launched" in detail.stdout and "scheduler shut down" in detail.stdout, detail.stdout


def test_a_missing_token_is_named_with_its_fix(tmp_path):
    state = tmp_path / "state"
    up = Up(state, "--slots", "1")
    try:
        (state / "token").unlink()
        result = up.cli("ls", check=False)
    finally:
        up.process.terminate()
        up.process.wait(60)
        up.log.close()
    assert result.returncode == 2, result.stdout + result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and str(state / "token") in line and "missing" in line, line
    assert "pollux up" in line and "--state-dir" in line, line

"""`pollux ls`, `logs`, `rm` and `submit` at a real cluster's load: one line per job at 80 columns, JSON and status
filters, logs merged in time order with the service down, finished jobs removed (their names used again), many
specs in one call."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

import pytest
from runtime_jobs import wait_for, write_spec
from test_cli_local import REPO, Up

from pollux.runtime.launcher import WorkerInfo
from pollux.runtime.spec import load_spec
from pollux.runtime.status import JobEvent
from pollux.runtime.store import StateStore

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

LONG_ERROR = "exit 1\n" + "\n".join(f"[rank 0] Traceback line {i} " + "word " * 60 for i in range(10))


def pollux(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a script runs it: its output piped, not a terminal."""
    command = [sys.executable, "-m", "pollux", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)


def in_terminal(*args: str, columns: int) -> str:
    """The command's output in a terminal `columns` wide (a pseudo-terminal, as a person's shell gives it)."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    with subprocess.Popen(
        [sys.executable, "-m", "pollux", *args], stdout=terminal, stderr=subprocess.DEVNULL, cwd=REPO, env=env
    ) as process:
        os.close(terminal)
        out = b""
        with contextlib.suppress(OSError):  # EIO once the command's end closed the terminal
            while chunk := os.read(controller, 65536):
                out += chunk
        assert process.wait(120) == 0
    os.close(controller)
    return re.sub(r"\x1b\[[0-9;]*m", "", out.decode()).replace("\r\n", "\n")  # without styles, as it reads


def stored_jobs(state: Path, counter_job: Path) -> StateStore:
    """A state directory holding jobs in every status, one with a long error, none of them running anywhere."""
    store = StateStore(state / "state.db")
    for i, name in enumerate(["done", "broken-with-a-long-name", "waiting", "busy", "stopped"]):
        store.add_job(load_spec(write_spec(counter_job.parent, name)), now=100.0 + i)
    for name in ("done", "broken-with-a-long-name", "busy"):
        store.record_launch(name, (1,), [WorkerInfo(0, 0, 1, "elsewhere", 1)], now=110.0, restart=False)
    store.record_exit("done", JobEvent.FINISHED, 120.0, "training script finished")
    store.record_exit("broken-with-a-long-name", JobEvent.GAVE_UP, 121.0, "crashed 3 times", LONG_ERROR, crashed=True)
    store.request_cancel("stopped", 122.0)
    store.record_exit("stopped", JobEvent.CANCELLED, 122.0, "cancelled by the user")
    return store


def test_ls_fits_80_columns_filters_by_status_and_prints_json_without_a_scheduler(tmp_path, counter_job):
    state = tmp_path / "state"
    stored_jobs(state, counter_job).close()
    listing = in_terminal("ls", "--state-dir", str(state), columns=80)
    lines = listing.splitlines()
    assert len(lines) == 1 + 5 and all(len(line) <= 80 for line in lines), listing
    rows = {line.split()[0]: line.split()[1] for line in lines[1:]}
    assert rows == {
        "done": "completed",
        "broken-with-a-long-name": "failed",
        "waiting": "pending",
        "busy": "running",
        "stopped": "cancelled",
    }
    assert "exit 1: [rank 0] T…" in listing  # a long name leaves the note little room, but some
    piped = pollux("ls", "--state-dir", str(state)).stdout  # into a pipe: one short line per job all the same
    assert len(piped.splitlines()) == 6 and max(map(len, piped.splitlines())) <= 200, piped
    detail = in_terminal("ls", "broken-with-a-long-name", "--state-dir", str(state), columns=80)
    assert LONG_ERROR.splitlines()[-1].strip() in detail  # `ls NAME` shows the error whole
    filtered = json.loads(pollux("ls", "--status", "running,pending", "--json", "--state-dir", str(state)).stdout)
    assert [(job["name"], job["status"], job["gpus"], job["restarts"]) for job in filtered] == [
        ("waiting", "pending", 0, 0),
        ("busy", "running", 1, 0),
    ]
    assert len(json.loads(pollux("ls", "--json", "--state-dir", str(state)).stdout)) == 5
    bad = pollux("ls", "--status", "running,sleeping", "--state-dir", str(state))
    assert bad.returncode == 2 and "sleeping" in bad.stderr and "pending, running" in bad.stderr, bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_rm_without_a_scheduler_removes_finished_jobs_and_refuses_the_others(tmp_path, counter_job):
    state = tmp_path / "state"
    stored_jobs(state, counter_job).close()
    (state / "jobs" / "done" / "logs").mkdir(parents=True)
    (state / "jobs" / "done" / "logs" / "rank-0.log").write_text("old\n")
    result = pollux("rm", "done", "busy", "stopped", "ghost", "--state-dir", str(state))
    assert result.returncode == 2, result.stderr
    assert result.stdout.splitlines() == ["removed done (completed)", "removed stopped (cancelled)"]
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 2 and "'busy' is running: cancel it first" in errors[0] and "'ghost'" in errors[1], errors
    assert not (state / "jobs" / "done").exists()
    store = StateStore(state / "state.db")
    try:
        assert [s.name for s in store.jobs()] == ["broken-with-a-long-name", "waiting", "busy"]
        removed = [(e["job"], e["status"]) for e in store.events() if e["kind"] == "removed"]
        assert removed == [("done", "completed"), ("stopped", "cancelled")]
        assert next(e["kind"] for e in store.events() if e["job"] == "done") == "submitted"  # its history stays
    finally:
        store.close()


# Ranks 0 and 1 take turns: tick i is printed by rank i % 2, a fifth of a second after tick i - 1.
TICKS = textwrap.dedent(
    """
    import os, time
    rank = int(os.environ["RANK"])
    time.sleep(1.0)  # both ranks are up
    for i in range(6):
        if i % 2 == rank:
            print(f"tick {i}", flush=True)
        time.sleep(0.2)
    """
)


def test_logs_with_the_scheduler_down_merge_the_ranks_in_the_order_they_wrote(tmp_path):
    (tmp_path / "ticks.py").write_text(TICKS)
    spec = tmp_path / "ticks.toml"
    spec.write_text('name = "ticks"\ncommand = "python ticks.py"\ninit_batch_size = 32\nadaptive = false\ngpus = 2\n')
    state = tmp_path / "state"
    up = Up(state, "--slots", "2", "--policy", "fifo", "--interval", "1")
    store = StateStore(state / "state.db")
    try:
        up.cli("submit", str(spec))
        wait_for(lambda: store.job("ticks").status == "completed", 60, "the job to complete")
    finally:
        store.close()
        up.down()
    for follow in ([], ["-f"]):  # a finished job: -f prints all and returns
        log = up.cli("logs", "ticks", *follow)
        assert "not running" in log.stderr, log.stderr
        ticks = [line for line in log.stdout.splitlines() if "tick" in line]
        assert ticks == [f"[rank {i % 2}] tick {i}" for i in range(6)], log.stdout
    assert pollux("logs", "nobody", "--state-dir", str(state)).returncode == 2


def test_submit_takes_many_specs_and_folders_and_rm_frees_a_finished_name(tmp_path, counter_job):
    folder = counter_job.parent  # the specs a, b and broken beside the job's script, and a note
    for name in ("b", "a"):
        write_spec(folder, name, "--steps 2 --step-s 0.01")
    (folder / "broken.toml").write_text('name = "broken"\ncommand = [')
    (folder / "notes.txt").write_text("not a spec")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "counter.py").write_text(counter_job.read_text())
    single = write_spec(elsewhere, "c", "--steps 100000 --step-s 0.05")
    state = tmp_path / "state"
    up = Up(state, "--slots", "2", "--policy", "fifo", "--interval", "1")
    try:
        result = up.cli("submit", str(folder), str(single), str(tmp_path / "absent.toml"), check=False)
        assert result.returncode == 2
        assert result.stdout.splitlines() == ["submitted a (pending)", "submitted b (pending)", "submitted c (pending)"]
        errors = result.stderr.strip().splitlines()
        assert len(errors) == 2, errors
        assert str(folder / "broken.toml") in errors[0] and "not valid TOML" in errors[0]
        assert str(tmp_path / "absent.toml") in errors[1] and "cannot read" in errors[1]
        jobs = json.loads(up.cli("ls", "--json").stdout)
        assert sorted(job["name"] for job in jobs) == ["a", "b", "c"]
        wait_for(lambda: json.loads(up.cli("ls", "--json", "--status", "completed").stdout), 60, "a to complete")
        wait_for(lambda: "completed" in up.cli("ls", "a").stdout, 60, "a to complete")
        refused = up.cli("rm", "c", check=False)
        assert refused.returncode == 2 and "cancel it first (`pollux cancel c`)" in refused.stderr, refused.stderr
        assert "already used" in up.cli("submit", str(folder / "a.toml"), check=False).stderr
        assert up.cli("rm", "a").stdout.strip() == "removed a (completed)"
        assert up.cli("submit", str(folder / "a.toml")).stdout.strip() == "submitted a (pending)"
        wait_for(lambda: "completed" in up.cli("ls", "a").stdout, 60, "the new a to complete")
    finally:
        up.down()

"""Text from a job, a spec or a file reaches the terminal as written: `[rank 0]` or gloo's `[/__w/…/pair.cc:537]` are
not rich markup, so `pollux ls` neither drops them nor dies on them."""

from __future__ import annotations

import pytest
from runtime_jobs import wait_for, write_spec
from test_cli_local import Up, pollux

from pollux.runtime.spec import load_spec
from pollux.runtime.status import JobEvent
from pollux.runtime.store import StateStore

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

GLOO = "[/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537]"
CONFIG_LINE = "[config] backend=gloo world_size=1"
ERROR_LINE = f"[rank 0] RuntimeError: {GLOO} Connection closed by peer [127.0.0.1]:29500"
# Prints what a torch job prints when its gloo peer dies, then crashes like it.
GLOO_CRASH = f"import sys\nprint({CONFIG_LINE!r})\nprint({ERROR_LINE!r}, flush=True)\nsys.exit(3)\n"


def test_a_crashed_jobs_bracketed_log_is_listed_literally(tmp_path):
    (tmp_path / "gloo_crash.py").write_text(GLOO_CRASH)
    spec = tmp_path / "gloo.toml"
    spec.write_text('name = "gloo"\ncommand = "python gloo_crash.py"\ninit_batch_size = 32\nadaptive = false\n')
    state = tmp_path / "state"
    up = Up(state, "--slots", "1", "--interval", "1", "--max-attempts", "1")
    store = StateStore(state / "state.db")
    try:
        up.cli("submit", str(spec))
        wait_for(lambda: store.job("gloo").status == "failed", 60, "the job to crash and fail")
        detail = up.cli("ls", "gloo")
        assert CONFIG_LINE in detail.stdout and ERROR_LINE in detail.stdout, detail.stdout
        listing = up.cli("ls")
        row = next(line for line in listing.stdout.splitlines() if "gloo" in line and "failed" in line)
        assert GLOO in row, listing.stdout  # the note shows the error's last line
    finally:
        store.close()
        up.down()


def test_a_stored_bracketed_error_is_listed_literally_without_a_scheduler(tmp_path, counter_job):
    """The same text read straight from the database (no service runs), through the same printing code."""
    state = tmp_path / "state"
    store = StateStore(state / "state.db")
    store.add_job(load_spec(write_spec(counter_job.parent, "gloo")), now=1.0)
    store.record_launch("gloo", (1,), [], now=1.5, restart=False)
    error = f"exit 3\n{CONFIG_LINE}\n{ERROR_LINE}"
    store.record_exit("gloo", JobEvent.GAVE_UP, 2.0, f"crashed 1 times {GLOO}", error=error, crashed=True)
    store.close()
    detail = pollux("ls", "gloo", "--state-dir", str(state))
    assert CONFIG_LINE in detail.stdout and ERROR_LINE in detail.stdout, detail.stdout
    assert f"crashed 1 times {GLOO}" in detail.stdout
    listing = pollux("ls", "--state-dir", str(state))
    assert GLOO in listing.stdout and "failed" in listing.stdout, listing.stdout


def test_an_error_message_quoting_brackets_is_one_literal_line(tmp_path):
    nowhere = tmp_path / "runs[" / "b]"  # the path reads `…/runs[/b]`: a closing tag to rich
    result = pollux("ls", "--state-dir", str(nowhere), check=False)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(nowhere) in lines[0], result.stderr

"""Every numeric option is checked before its command starts anything: a bad value is one line naming the option and
its range, exit 2, at once (`simulate --interval 0` used to spin for ever, `up --max-attempts 0` to start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

BAD_VALUES = [
    (["simulate"], "--interval", "0"),
    (["simulate"], "--interval", "-60"),
    (["simulate"], "--restart-delay", "-5"),
    (["simulate"], "--nodes", "0"),
    (["simulate"], "--gpus-per-node", "-1"),
    (["simulate"], "--interference", "1"),
    (["simulate"], "--interference", "-0.1"),
    (["simulate"], "--seed", "-1"),
    (["simulate"], "--processes", "0"),
    (["workload", "generate", "--jobs", "5", "--hours", "1"], "--jobs", "0"),
    (["workload", "generate", "--jobs", "5", "--hours", "1"], "--hours", "0"),
    (["workload", "generate", "--jobs", "5", "--hours", "1"], "--hours", "25"),
    (["workload", "generate", "--jobs", "5", "--hours", "1"], "--load", "0"),
    (["workload", "generate", "--jobs", "5", "--hours", "1"], "--start-hour", "24"),
    (["workload", "generate", "--jobs", "5", "--hours", "1"], "--seed", "-3"),
    (["up"], "--interval", "0"),
    (["up"], "--interval", "-5"),
    (["up"], "--interval", "nan"),
    (["up"], "--restart-delay", "-5"),
    (["up"], "--stop-grace", "-1"),
    (["up"], "--max-attempts", "0"),
    (["up"], "--backoff", "-1"),
    (["up"], "--slots", "0"),
    (["up"], "--listen", "127.0.0.1:70000"),
    (["up"], "--checkpoint-interval", "0"),
    (["down"], "--timeout", "0"),
]


@pytest.mark.parametrize(
    ("command", "option", "value"),
    BAD_VALUES,
    ids=[f"{c[-1] if c[0] != 'workload' else 'generate'} {o} {v}" for c, o, v in BAD_VALUES],
)
def test_a_numeric_option_out_of_range_is_one_line_and_exit_2(tmp_path, command, option, value):
    args = [*command, option, value]
    if command[0] in ("up", "down"):
        args += ["--state-dir", str(tmp_path / "state")]
    if command[0] == "simulate":
        args += ["--out", str(tmp_path / "out")]
    if command[0] == "workload":
        args += ["--out", str(tmp_path / "w.csv")]
    result = subprocess.run(
        [sys.executable, "-m", "pollux", *args], capture_output=True, text=True, timeout=30, cwd=tmp_path
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {option} must be "), result.stderr
    assert not result.stdout
    assert not (tmp_path / "state").exists() and not (tmp_path / "out").exists() and not (tmp_path / "w.csv").exists()

"""Periodic checkpoints: a crash loses at most one checkpoint interval of training, and the math stays exact.

Two real gloo processes train workers/elastic.py with a short interval; one of them is SIGKILLed mid-training (a
worker crash: no SIGTERM, no chance to save), its sibling is killed as the launcher would, and the job restarts.
"""

from __future__ import annotations

import json
import math
import signal
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
from agent_launch import logs, run, start, wait  # noqa: E402

from pollux.agent.context import (  # noqa: E402
    AUTO_CHECKPOINT_COST_FACTOR,
    AUTO_CHECKPOINT_MIN_S,
    AgentContext,
    _interval_from_env,
)
from pollux.errors import AgentError  # noqa: E402

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

INTERVAL_S = 0.3
STEP_S = 0.03


def test_a_killed_worker_costs_at_most_one_interval_and_training_ends_exactly(tmp_path: Path) -> None:
    ref = tmp_path / "uninterrupted"
    ref.mkdir()
    assert run("elastic", ["--workdir", str(ref)], 1, ref) == [0], logs(ref)
    job = tmp_path / "job"
    job.mkdir()
    env = {"POLLUX_CHECKPOINT_DIR": str(job / "ckpt"), "POLLUX_CHECKPOINT_INTERVAL_S": str(INTERVAL_S)}
    procs = start("elastic", ["--workdir", str(job), "--step-sleep", str(STEP_S)], 2, env, job)
    progress = job / "progress.txt"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        if progress.exists() and (text := progress.read_text()) and int(text) >= 40:
            break
        time.sleep(0.01)
    killed_at = time.time()
    procs[1].send_signal(signal.SIGKILL)  # a crash: nothing saved on the way out
    procs[0].send_signal(signal.SIGKILL)  # the launcher kills the siblings of a crashed worker
    assert wait(procs) == [-signal.SIGKILL] * 2
    steps_at_kill = int(progress.read_text())
    assert steps_at_kill < 60, "the job finished before the kill: nothing was tested"
    assert logs(job).count("checkpoint saved to") >= 2  # periodic saves, no stop request involved

    assert wait(start("elastic", ["--workdir", str(job)], 2, env, job)) == [0, 0], logs(job)[-3000:]
    restore = json.loads((job / "restores.jsonl").read_text().splitlines()[0])
    assert 0 < restore["steps"] <= steps_at_kill
    # lost: at most the interval, plus the exchange's lag (a few steps) and a save in progress on a busy machine
    assert killed_at - restore["saved_at_s"] < INTERVAL_S + 2.0
    ref_final, job_final = torch.load(ref / "final.pt"), torch.load(job / "final.pt")
    for a, b in zip(
        ref_final["params"] + ref_final["momentum"], job_final["params"] + job_final["momentum"], strict=True
    ):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)  # mid-epoch saves resume the same arithmetic


def agent(interval_s: float | None, checkpoint_dir: Path | None) -> AgentContext:
    return AgentContext(0, 1, 0, 1, checkpoint_dir, None, None, False, checkpoint_interval_s=interval_s)


def test_without_a_setting_the_interval_follows_the_cost_of_a_save(tmp_path: Path) -> None:
    auto = agent(None, tmp_path)
    assert auto.checkpoint_interval_s == AUTO_CHECKPOINT_MIN_S  # nothing measured yet
    auto.last_save_s = 0.001
    assert auto.checkpoint_interval_s == AUTO_CHECKPOINT_MIN_S
    auto.last_save_s = 2.0  # a large model: saving stays at 1/AUTO_CHECKPOINT_COST_FACTOR of the time
    assert auto.checkpoint_interval_s == 2.0 * AUTO_CHECKPOINT_COST_FACTOR
    assert agent(7.0, tmp_path).checkpoint_interval_s == 7.0
    assert not agent(1e-9, None).checkpoint_due()  # nowhere to save: never due


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan", "inf"])
def test_a_bad_interval_in_the_environment_is_named(value: str) -> None:
    with pytest.raises(AgentError, match=f"POLLUX_CHECKPOINT_INTERVAL_S={value!r}"):
        _interval_from_env(value)


def test_auto_or_unset_means_the_cost_based_default() -> None:
    assert _interval_from_env(None) is None and _interval_from_env("auto") is None and _interval_from_env("") is None
    assert math.isclose(_interval_from_env("12.5") or 0, 12.5)

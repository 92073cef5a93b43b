"""Elastic checkpoint-restart in real training (gloo, CPU): 2 processes, SIGTERM, 1 process, SIGTERM, 3 processes.

workers/elastic.py trains SGD with momentum and a step LR schedule at a fixed total batch of 12 in the elastic
sampler's order, so the interrupted, resized job must do the same arithmetic as an uninterrupted one.
"""

import shutil
import signal
import time
from collections import Counter

import pytest

torch = pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
from agent_launch import logs, run, start, wait  # noqa: E402

from pollux.agent.report import read_report  # noqa: E402

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

EXAMPLES, EPOCHS, STEPS = 240, 3, 60


def run_until(workdir, nprocs, env, stop_at_step):
    """Start `nprocs` ranks; once rank 0 has finished `stop_at_step` steps (where every rank waits for the signal),
    SIGTERM every rank."""
    args = ["--workdir", str(workdir), "--step-sleep", "0.03", "--hold-at-step", str(stop_at_step)]
    procs = start("elastic", args, nprocs, env, workdir)
    progress = workdir / "progress.txt"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        text = progress.read_text() if progress.exists() else ""
        if text and int(text) >= stop_at_step:
            break
        time.sleep(0.02)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    return wait(procs)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    ref = tmp_path_factory.mktemp("uninterrupted")
    # the reference shares nothing with the interrupted job (its own folder, port and no checkpoints): it trains
    # meanwhile, on the CPU the interrupted job leaves idle while it sleeps between steps and waits for its SIGTERMs
    reference = start("elastic", ["--workdir", str(ref)], 1, None, ref)
    try:
        job = tmp_path_factory.mktemp("elastic")
        env = {"POLLUX_CHECKPOINT_DIR": str(job / "ckpt"), "POLLUX_REPORT_PATH": str(job / "report.json")}
        codes = [run_until(job, 2, env, stop_at_step=8)]
        stopped_at = [int((job / "progress.txt").read_text())]
        codes.append(run_until(job, 1, env, stop_at_step=stopped_at[0] + 20))
        stopped_at.append(int((job / "progress.txt").read_text()))
        shutil.copytree(job / "ckpt", job / "ckpt-after-second-stop")
        codes.append(wait(start("elastic", ["--workdir", str(job)], 3, env, job)))
    finally:
        reference_codes = wait(reference)
    assert reference_codes == [0], logs(ref)
    return {"ref": ref, "job": job, "codes": codes, "stopped_at": stopped_at, "logs": logs(job)}


def test_sigterm_finishes_the_step_checkpoints_and_exits_143(scenario):
    assert scenario["codes"] == [[143, 143], [143], [0, 0, 0]], scenario["logs"][-3000:]
    first, second = scenario["stopped_at"]
    assert 8 <= first < second < STEPS  # both stops interrupted training mid-way
    assert f"checkpoint saved to {scenario['job'] / 'ckpt'}" in scenario["logs"]
    assert "(saved by 2 replicas, now 1)" in scenario["logs"]
    assert "(saved by 1 replicas, now 3)" in scenario["logs"]


def test_no_example_is_skipped_or_repeated_within_an_epoch(scenario):
    seen = Counter()
    for path in scenario["job"].glob("indices-*.txt"):
        seen.update(tuple(map(int, line.split())) for line in path.read_text().splitlines())
    expected = {(epoch, i) for epoch in range(EPOCHS) for i in range(EXAMPLES)}
    assert set(seen) == expected
    assert max(seen.values()) == 1


def test_model_and_optimizer_state_continue_exactly_as_in_an_uninterrupted_run(scenario):
    ref = torch.load(scenario["ref"] / "final.pt")
    job = torch.load(scenario["job"] / "final.pt")
    for a, b in zip(ref["params"] + ref["momentum"], job["params"] + job["momentum"], strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)  # same math, different summation order


def test_measurement_history_and_progress_persist_across_restarts(scenario):
    report = read_report(scenario["job"] / "report.json")
    assert report.status == "finished" and report.restarts == 2
    assert report.progress.steps == STEPS and report.progress.examples == EPOCHS * EXAMPLES
    assert report.max_replicas_seen == 3
    assert report.throughput_configs == 3  # (1 node, K replicas, 12/K, no accumulation) for K = 2, 1, 3
    assert report.grad_stats is not None and report.throughput_params is not None


def test_a_corrupt_checkpoint_is_detected_and_the_previous_good_one_used(scenario, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(scenario["job"] / "ckpt-after-second-stop", ckpt)
    older, newest = sorted(ckpt.iterdir())
    newest.write_bytes(newest.read_bytes()[:-100])  # a save cut short
    env = {"POLLUX_CHECKPOINT_DIR": str(ckpt)}
    assert run("elastic", ["--workdir", str(tmp_path)], 1, tmp_path, env) == [0]
    out = logs(tmp_path)
    assert f"checkpoint {newest} is corrupt or unreadable" in out
    assert f"restoring from the previous good checkpoint {older}" in out
    first = scenario["stopped_at"][0]
    assert f"restored {older}: epoch 0, step {first}" in out
    ref, job = torch.load(scenario["ref"] / "final.pt"), torch.load(tmp_path / "final.pt")
    for a, b in zip(ref["params"], job["params"], strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)

"""A job moved to another GPU type keeps its progress exactly and learns a second throughput model beside the first
(docs/agent-report-schema.md, version 2): real training (gloo, CPU), SIGTERM on type "a", resumed on type "b"."""

import json
import signal
import time

import pytest

torch = pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
from agent_launch import logs, run, start, wait  # noqa: E402

from pollux.agent.context import BOOTSTRAP_ENV, GPU_TYPE_ENV  # noqa: E402
from pollux.agent.report import params_json, read_report  # noqa: E402
from pollux.goodput import scaled_params  # noqa: E402

pytestmark = pytest.mark.e2e

EXAMPLES, EPOCHS, STEPS = 240, 3, 60


def stop_at(workdir, env, step):
    """One rank, held at `step` until SIGTERM (the elastic test's worker); its exit codes."""
    args = ["--workdir", str(workdir), "--step-sleep", "0.02", "--hold-at-step", str(step)]
    procs = start("elastic", args, 1, env, workdir)
    progress = workdir / "progress.txt"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and procs[0].poll() is None:
        if progress.exists() and (text := progress.read_text()) and int(text) >= step:
            break
        time.sleep(0.02)
    procs[0].send_signal(signal.SIGTERM)
    return wait(procs)


def test_a_restart_onto_another_type_keeps_progress_and_each_types_model(tmp_path):
    ref = tmp_path / "ref"
    assert run("elastic", ["--workdir", str(ref)], 1, ref, {"POLLUX_REPORT_PATH": str(ref / "report.json")}) == [0]
    job = tmp_path / "job"
    job.mkdir()
    env = {"POLLUX_CHECKPOINT_DIR": str(job / "ckpt"), "POLLUX_REPORT_PATH": str(job / "report.json")}
    assert stop_at(job, {**env, GPU_TYPE_ENV: "a"}, 20) == [143], logs(job)
    on_a = read_report(job / "report.json")
    assert on_a.gpu_type == "a" and set(on_a.throughput_params_by_type) == {"a"}
    assert on_a.throughput_params == on_a.throughput_params_by_type["a"]
    # the scheduler's bootstrap for "b": the model of "a", twice as fast (what the typed policy predicts)
    bootstrap = scaled_params(on_a.throughput_params_by_type["a"], 2.0)
    boot_env = {GPU_TYPE_ENV: "b", BOOTSTRAP_ENV: json.dumps(params_json(bootstrap))}
    assert run("elastic", ["--workdir", str(job)], 1, job, {**env, **boot_env}) == [0], logs(job)
    done = read_report(job / "report.json")
    # progress continues exactly: every step and example once, the same parameters as an uninterrupted run
    assert (done.status, done.restarts, done.gpu_type) == ("finished", 1, "b")
    assert done.progress.steps == STEPS and done.progress.examples == EPOCHS * EXAMPLES
    assert done.progress.m0_steps == pytest.approx(read_report(ref / "report.json").progress.m0_steps)
    final, expected = torch.load(job / "final.pt"), torch.load(ref / "final.pt")
    for a, b in zip(expected["params"] + expected["momentum"], final["params"] + final["momentum"], strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    # per type: the samples and models of both, "a"'s model as it was left, "b"'s fitted on its own steps
    assert set(done.throughput_samples_by_type) == {"a", "b"}
    assert done.throughput_samples_by_type["a"] == on_a.throughput_samples_by_type["a"]
    assert done.throughput_params_by_type["a"] == on_a.throughput_params_by_type["a"]
    assert done.throughput_params == done.throughput_params_by_type["b"] != bootstrap
    assert set(done.run_time_by_type_s) == {"a", "b"} and all(t > 0 for t in done.run_time_by_type_s.values())
    assert 0 < done.run_time_by_type_s["a"] <= on_a.run_time_by_type_s["a"]  # as checkpointed, before the report

"""`pollux tune` end to end (issue 30's acceptance): TPE and ASHA on digits_mlp.py, every trial a job of a real
`pollux up` on CPU slots; `pollux tune` killed with -9 half-way and run again resumes the experiment."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runtime_jobs import pid_alive, wait_for
from test_cli_local import DIGITS, REPO, Up, pollux

from pollux.runtime.store import StateStore

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

# Reports reach Tune through the service, a second or two after a job writes them, while digits_mlp.py trains an epoch
# in about 0.1 s: a 5-epoch trial would be over before ASHA's decision on its first report reached Pollux. So every
# trial asks for far more epochs than it gets: ASHA ends each at its MAX_T-th report (its job is cancelled then), and
# one it stops on its metric still has most of its epochs ahead when Pollux cancels it.
EPOCHS = 200
MAX_T = 5
# Seed 2's three random trials are lr 0.034, 0.28 and 0.00023 (HyperOpt draws them in that order whatever the
# timing): the first two reach test accuracy 0.79 and 0.91 after one epoch, the third stays at chance (0.10) at any
# batch size Pollux picks. The third starts only when one of the first two has ended, so at its first report ASHA
# holds at least one of theirs and stops it there for certain: the test need not hope the accuracies happen to differ.
EXPERIMENT = f"""
name = "hpo"
metric = "accuracy"
mode = "max"
trials = 6
concurrency = 2
search = "tpe"
initial_random_trials = 3
seed = 2

[space]
lr = {{ type = "loguniform", low = 0.0001, high = 0.5 }}
batch_size = {{ type = "choice", values = [16, 64] }}

[asha]
grace_period = 1
reduction_factor = 2
max_t = {MAX_T}

[job]
command = ["python", "{DIGITS}", "--epochs", "{EPOCHS}", "--lr", "{{lr}}", "--batch-size", "{{batch_size}}"]
init_batch_size = "{{batch_size}}"
max_batch_size = 256
local_bsz_bounds = [8, 64]
max_gpus = 4
"""


def descendants(pid: int) -> set[int]:
    """Every process below `pid` now (Ray's processes are the children of the `pollux tune` that started it)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rfind(")") + 2 :].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def trial_results(state: Path, trial: str) -> list[dict]:
    """What Tune recorded of a trial (its result.json, one line per report), over both runs."""
    (folder,) = (state / "experiments" / "hpo").glob(f"run_trial_{trial}_*")
    return [json.loads(line) for line in (folder / "result.json").read_text().splitlines() if line.strip()]


def test_tune_runs_every_trial_as_a_pollux_job_and_resumes_after_kill_9(tmp_path):
    pytest.importorskip(
        "ray.tune", reason="pollux tune needs Ray Tune: make test installs it (pip install -e '.[tune]')"
    )
    pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
    pytest.importorskip("sklearn", reason="the examples need it: make test installs it (pip install -e '.[examples]')")
    state = tmp_path / "state"
    experiment = tmp_path / "hpo.toml"
    experiment.write_text(EXPERIMENT)
    up = Up(state, "--slots", "4", "--interval", "2", "--restart-delay", "1", "--lease", "0")
    try:
        store = StateStore(state / "state.db")
        jobs = lambda: [j for j in store.jobs() if j.spec.get("experiment") == "hpo"]  # noqa: E731
        first_out = tmp_path / "tune-1.log"
        with first_out.open("w") as out:
            first = subprocess.Popen(
                [sys.executable, "-m", "pollux", "tune", str(experiment), "--state-dir", str(state)],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        ended = re.compile(r"trial (\w+): (finished|stopped early)")
        wait_for(lambda: ended.search(first_out.read_text()) or first.poll() is not None, 300, "a trial to end")
        time.sleep(2.5)  # Tune saves the experiment every second
        wait_for(lambda: any(j.status == "running" for j in jobs()) or first.poll() is not None, 120, "a running job")
        assert first.poll() is None, first_out.read_text()
        ray_processes = descendants(first.pid)
        done_before = {j.name for j in jobs() if j.status in ("completed", "cancelled")}
        running_at_kill = {j.name for j in jobs() if j.status == "running"}
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        ended_before = {m.group(1) for m in ended.finditer(first_out.read_text())}
        wait_for(lambda: not any(pid_alive(p) for p in ray_processes), 60, "the killed run's Ray processes to exit")

        second = pollux("tune", str(experiment), "--state-dir", str(state), timeout=600)
        output = second.stdout
        assert "resuming experiment hpo" in output, output

        # every trial ran as one Pollux job, submitted once; no trial that had ended before the kill started again
        trials = {j.spec["trial"]: j for j in jobs()}
        assert len(trials) == 6 and all(j.status in ("completed", "cancelled") for j in trials.values()), trials
        for job in trials.values():
            assert [e["kind"] for e in store.events(job.name)].count("submitted") == 1
        restarted = set(re.findall(r"trial (\w+): job ", output))
        assert ended_before and not ended_before & restarted, (ended_before, restarted)
        # a job running at the kill kept running in the service, and its trial went on from its Tune checkpoint
        for name in running_at_kill - done_before:
            history = [status for _, status, _ in store.history(name)]
            assert "cancelled" not in history[:-1] and history.count("pending") <= history.count("running"), history
            steps = [r["step"] for r in trial_results(state, store.job(name).spec["trial"])]
            assert steps == sorted(set(steps)), steps  # no report handed to Tune twice
        # the policy resized at least one trial; ASHA stopped at least one, which Pollux cancelled
        sizes = {
            j.name: {sum(e["allocation"]) for e in store.events(j.name) if e["kind"] == "allocation"} - {0}
            for j in trials.values()
        }
        assert any(len(s) > 1 for s in sizes.values()), sizes
        # ASHA stopped at least one on its metric (before MAX_T reports), and Pollux cancelled its job
        handed = {t: len(trial_results(state, t)) for t in trials}
        early = [t for t, j in trials.items() if j.status == "cancelled" and handed[t] < MAX_T]
        assert early and all(len(store.metrics(trials[t].name)) < EPOCHS for t in early), (handed, trials)
        assert all(count <= MAX_T for count in handed.values()), handed
        assert re.search(rf"stopped early by Tune after [1-{MAX_T - 1}] report", first_out.read_text() + output), output
        # the best configuration and metric printed are those of the trials' own reports
        best = re.search(r"best accuracy ([\d.]+): trial (\w+) \(hpo-\w+\), lr=([\d.e+-]+), batch_size=(\d+)", output)
        assert best, output
        reported = {t: max(r.metrics["accuracy"] for _, r in store.metrics(j.name)) for t, j in trials.items()}
        top = max(reported.values())
        assert float(best.group(1)) == pytest.approx(top, abs=5e-6) and reported[best.group(2)] == top
        spec = trials[best.group(2)].spec
        lr = float(spec["command"][spec["command"].index("--lr") + 1])
        assert float(best.group(3)) == pytest.approx(lr, rel=1e-3) and int(best.group(4)) == spec["init_batch_size"]
        listing = up.cli("ls").stdout
        assert "experiment hpo: 6 trial job(s)" in listing, listing
        store.close()
    finally:
        up.down()

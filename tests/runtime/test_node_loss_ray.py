"""A node lost under a running job (issue 18): on a real autoscaling Ray cluster of fake nodes
(`test_autoscale_ray.AutoscalingRay`) where Pollux keeps two a100 nodes (`--node-type a100:2:2:2`), every process of
the node that runs the job is SIGKILLed at once, as when a machine dies. Ray declares the node dead, Pollux drops it
from the pool and stops the job as lost (not as a crash), and the job resumes from its last periodic checkpoint on
the other a100 node: it ends with the steps, examples and model of an uninterrupted run.

Why two nodes: Ray's fake provider never replaces a dead node. With node updaters disabled its nodes keep the
"uninitialized" status, which Ray's autoscaler does not check for liveness, so the dead node is never terminated
and still counts towards `request_resources` (it shows as "Pending" in the autoscaler's status).

The job is tests/agent/workers/elastic.py (fixed total batch, fixed data order), so "nothing lost" is exact: the
final parameters and momentum equal those of an uninterrupted run of the same script."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="the Ray backend needs ray: make test installs it (pip install -e '.[ray]')")
pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
import torch
from runtime_jobs import wait_for
from test_autoscale_ray import RESOURCE, AutoscalingRay
from test_cli_local import REPO, Up

from pollux.agent.report import read_report
from pollux.runtime.store import StateStore
from tests.agent.agent_launch import run

pytestmark = pytest.mark.e2e

ELASTIC = REPO / "tests" / "agent" / "workers" / "elastic.py"
EXAMPLES, EPOCHS = 240, 6
STEPS = EPOCHS * EXAMPLES // 12  # the worker's fixed total batch is 12
KILL_AT_STEP = 30  # past at least one periodic checkpoint (every second), far from the end


def node_of(job: str) -> str:
    """The Ray node id hosting the job's placement group (Pollux names it `pollux-<job>`)."""
    from ray.util.placement_group import placement_group_table

    groups = [g for g in placement_group_table().values() if g["name"] == f"pollux-{job}" and g["state"] == "CREATED"]
    assert len(groups) == 1, groups
    (node,) = set(groups[0]["bundles_to_node_id"].values())
    return node


def node_processes(cluster: AutoscalingRay, node_id: str) -> list[int]:
    """Every process of one fake node of this cluster: the ones started for that node (Ray gives them its id in
    `RAY_OVERRIDE_NODE_ID_FOR_TESTING`) whose command line names this cluster's temporary directory (the raylet,
    its agents, the actors' workers), and all their descendants (the job's training processes)."""
    marker = f"RAY_OVERRIDE_NODE_ID_FOR_TESTING={node_id}".encode()
    parents: dict[int, int] = {}
    roots: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat[stat.rfind(")") + 2 :].split()[1])
            environ = (entry / "environ").read_bytes().split(b"\0")
            if marker in environ and cluster.temp_dir.encode() in (entry / "cmdline").read_bytes():
                roots.add(int(entry.name))
    found = set(roots)
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in found} - found
        found |= children
        grew = bool(children)
    return sorted(found)


def kill_node(cluster: AutoscalingRay, node_id: str) -> list[str]:
    """SIGKILL every process of the node at once; their names, for the printout."""
    pids = node_processes(cluster, node_id)
    names = []
    for pid in pids:
        with contextlib.suppress(OSError):
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return names


def test_a_job_on_a_lost_node_resumes_from_its_checkpoint_on_another_node(tmp_path, autoscaling_ray):
    cluster = autoscaling_ray
    reference = tmp_path / "uninterrupted"
    assert run(ELASTIC, ["--workdir", str(reference), "--epochs", str(EPOCHS)], 1, reference) == [0]
    workdir = tmp_path / "job"
    workdir.mkdir()
    spec = tmp_path / "elastic.toml"
    spec.write_text(
        f'name = "elastic"\ncommand = ["{sys.executable}", "{ELASTIC}", "--workdir", "{workdir}", "--epochs", '
        f'"{EPOCHS}", "--step-sleep", "0.1"]\ninit_batch_size = 12\nadaptive = false\nmax_gpus = 1\n'
        'gpu_types = ["a100"]\ncheckpoint_interval_s = 1\n'
    )
    state = tmp_path / "state"
    up = Up(
        state,
        *("--backend", "ray", "--ray-address", cluster.address, "--gpu-resource", RESOURCE, "--autoscale"),
        *("--node-type", "a100:2:2:2"),
        *("--interval", "1", "--restart-delay", "1", "--lease", "0", "--stop-grace", "30"),
    )
    store = StateStore(state / "state.db")
    try:
        wait_for(lambda: cluster.nodes().get("a100") == 2, 120, "Ray to start the two a100 nodes Pollux keeps")
        up.cli("submit", str(spec))
        progress = workdir / "progress.txt"

        def past_kill_step() -> bool:
            cluster.nodes()
            return progress.exists() and int(progress.read_text() or 0) >= KILL_AT_STEP

        wait_for(past_kill_step, 120, f"the job to train {KILL_AT_STEP} steps on one of them")
        lost = node_of("elastic")
        cluster.spoiled = True  # a dead node stays in Ray's fake provider: a later test gets a fresh cluster
        killed = kill_node(cluster, lost)
        killed_at = time.monotonic() - cluster.started
        assert "raylet" in killed, killed

        def completed() -> bool:
            cluster.nodes()
            return store.job("elastic").status == "completed"

        wait_for(completed, 120, "the job to resume on the other node and complete")
        print("\na100 nodes Ray ran over time (s since the test started):")
        for at, counts in cluster.samples:
            print(f"  {at:6.1f}  {counts or 'none'}")
        print(f"killed node ...{lost[-5:]} at {killed_at:.1f} s (step >= {KILL_AT_STEP}): {' '.join(sorted(killed))}")
        print("the job's history (s since submission):")
        history = store.history("elastic")
        for at, status, reason in history:
            print(f"  {at - history[0][0]:6.1f}  {status:10s} {reason}")
        final = store.job("elastic")
        (restored,) = [json.loads(line) for line in (workdir / "restores.jsonl").read_text().splitlines()]
        print(f"restarts {final.restarts}, crash attempts {final.attempts}")
        print(f"resumed from its checkpoint of step {restored['steps']} (of {STEPS})")
        assert restored["steps"] > 0  # from a checkpoint, not from the start
        assert any("node" in reason and "lost" in reason for _, _, reason in history), history
        assert final.attempts == 0  # a lost node is not the job's crash
        assert final.restarts >= 1
        report = read_report(state / "jobs" / "elastic" / "report.json")
        assert report.status == "finished" and report.progress.epoch == EPOCHS
        assert report.progress.steps == STEPS and report.progress.examples == EPOCHS * EXAMPLES
        ref, job = torch.load(reference / "final.pt"), torch.load(workdir / "final.pt")
        for a, b in zip(ref["params"] + ref["momentum"], job["params"] + job["momentum"], strict=True):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    finally:
        store.close()
        up.down()

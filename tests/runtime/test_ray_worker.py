"""The Ray launcher's worker actor as a plain object in this process, wired by `rank_wiring`: real worker
processes, no Ray cluster (all the actor does but say where it runs is Ray-free)."""

from __future__ import annotations

import json
import signal
import socket
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_jobs import ENV_DUMP, TERM_WAITER, log_lines, pid_alive, wait_for

from pollux.runtime.joblog import rank_log_path
from pollux.runtime.ray_start import rank_wiring
from pollux.runtime.ray_worker import WorkerActor

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

# Starts a helper in its session and waits; the helper's pid goes to helper-<rank>.
WITH_HELPER = """
    import os, subprocess, sys, time
    out, rank = sys.argv[1], os.environ["RANK"]
    helper = subprocess.Popen(["sleep", "60"])
    open(os.path.join(out, f"helper-{rank}.tmp"), "w").write(str(helper.pid))
    os.rename(os.path.join(out, f"helper-{rank}.tmp"), os.path.join(out, f"helper-{rank}"))
    time.sleep(60)
"""


@pytest.fixture
def actors() -> Iterator[list[WorkerActor]]:
    """Worker actors for a test; whatever they still run is killed when it ends."""
    made: list[WorkerActor] = []
    yield made
    for actor in made:
        actor.kill()


def start(actors: list[WorkerActor], tmp_path: Path, source: str, wiring: dict, env: dict | None = None) -> int:
    """A new actor started on `source` with `wiring`; the worker's pid. Each worker runs a script file of its own:
    rewriting one file for the next rank could truncate it while an earlier worker was still reading it (that one
    then ran an empty script and exited 0)."""
    script = tmp_path / f"job-{len(actors)}.py"
    script.write_text(textwrap.dedent(source))
    actor = WorkerActor()
    actors.append(actor)
    started = actor.start(
        ["python", str(script), str(tmp_path)], env or {}, wiring, str(tmp_path), str(tmp_path / "logs")
    )
    assert started.error is None and started.pid > 0 and started.start_ticks > 0
    return started.pid


def test_each_actor_starts_its_rank_in_its_own_session_dying_with_it_and_logging_by_itself(
    actors: list[WorkerActor], tmp_path: Path
) -> None:
    wiring = rank_wiring((1, 2), [0, 1, 1], "10.0.0.1", 29500, "pollux_gpu")
    pids = [start(actors, tmp_path, ENV_DUMP, wiring[rank], {"FROM_REQUEST": "yes"}) for rank in range(3)]
    wait_for(lambda: all(actor.poll() == 0 for actor in actors), 30, "the workers to finish")
    seen = [json.loads((tmp_path / f"env-{rank}.json").read_text()) for rank in range(3)]
    assert [(env["RANK"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) for env in seen] == [
        ("0", "0", "1"),
        ("1", "0", "2"),
        ("2", "1", "2"),
    ]
    for pid, env in zip(pids, seen, strict=True):
        assert (env["pid"], env["own_session"], env["pdeathsig"], env["executable"]) == (
            pid,
            True,
            signal.SIGTERM,
            sys.executable,
        )
        assert (env["WORLD_SIZE"], env["POLLUX_NUM_NODES"], env["CUDA_VISIBLE_DEVICES"], env["FROM_REQUEST"]) == (
            "3",
            "2",
            "",
            "yes",
        )
    log = log_lines(rank_log_path(tmp_path / "logs", 2))
    assert log[0].startswith("[pollux] ") and " rank 2 of 3 on " in log[0]
    assert log[1:] == ["hello from 2"]


def test_terminate_lets_the_worker_checkpoint_and_exit_143(actors: list[WorkerActor], tmp_path: Path) -> None:
    start(actors, tmp_path, TERM_WAITER, rank_wiring((1,), [0], "127.0.0.1", 1, "pollux_gpu")[0])
    wait_for(lambda: (tmp_path / "ready-0").exists(), 30, "the worker to start")
    assert actors[0].poll() is None
    actors[0].terminate()
    wait_for(lambda: actors[0].poll() is not None, 30, "the worker to exit")
    assert actors[0].poll() == 143 and (tmp_path / "term-0").exists()


def test_kill_ends_the_worker_and_its_helpers_at_once_as_137(actors: list[WorkerActor], tmp_path: Path) -> None:
    pid = start(actors, tmp_path, WITH_HELPER, rank_wiring((1,), [0], "127.0.0.1", 1, "pollux_gpu")[0])
    helper = int(wait_for(lambda: (tmp_path / "helper-0").exists() and (tmp_path / "helper-0").read_text(), 30))
    assert actors[0].kill() == 137  # SIGKILL, collected within the kill
    wait_for(lambda: not pid_alive(pid) and not pid_alive(helper), 5, "the worker and its helper to die")


def test_a_worker_that_cannot_start_is_an_answer_saying_why(tmp_path: Path) -> None:
    wiring = rank_wiring((1,), [0], "127.0.0.1", 1, "pollux_gpu")[0]
    actor = WorkerActor()
    missing = actor.start(["no-such-program-pollux"], {}, wiring, str(tmp_path), str(tmp_path / "logs"))
    assert missing.pid == 0 and "no-such-program-pollux" in (missing.error or "")
    (tmp_path / "file").write_text("")
    unwritable = actor.start(["true"], {}, wiring, str(tmp_path), str(tmp_path / "file" / "logs"))
    assert unwritable.pid == 0 and "cannot write its log" in (unwritable.error or "")
    assert actor.poll() is None and actor.kill() is None  # nothing started, nothing to report


def test_the_rendezvous_port_is_free_on_every_interface() -> None:
    port = WorkerActor().free_port()
    with socket.socket() as s:
        s.bind(("", port))

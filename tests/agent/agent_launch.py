"""Start N worker processes the way torchrun does (RANK, WORLD_SIZE, MASTER_ADDR/PORT on 127.0.0.1), for tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(
    worker: str | Path, args: list[str], nprocs: int, env: dict[str, str] | None = None, log_dir: Path | None = None
) -> list[subprocess.Popen]:
    """Start `nprocs` ranks of tests/agent/workers/<worker>.py (or of the script at a Path); stdout+stderr of rank r
    go to log_dir/rank<r>.log."""
    script = worker if isinstance(worker, Path) else WORKERS / f"{worker}.py"
    port = free_port()
    procs = []
    for rank in range(nprocs):
        proc_env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(nprocs),
            "LOCAL_WORLD_SIZE": str(nprocs),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO),
            **(env or {}),
        }
        out = open(log_dir / f"rank{rank}.log", "ab") if log_dir else subprocess.DEVNULL  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), *args],
                env=proc_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        )
    return procs


def wait(procs: list[subprocess.Popen], timeout_s: float = 120) -> list[int]:
    """Exit codes of all ranks; kills every rank if one hangs past the timeout."""
    try:
        return [p.wait(timeout=timeout_s) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        raise


def run(
    worker: str | Path,
    args: list[str],
    nprocs: int,
    log_dir: Path,
    env: dict[str, str] | None = None,
    timeout_s: float = 120,
) -> list[int]:
    log_dir.mkdir(parents=True, exist_ok=True)
    return wait(start(worker, args, nprocs, env, log_dir), timeout_s)


def logs(log_dir: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("rank*.log")))

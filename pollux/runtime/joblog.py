"""A job's log: one file per rank, written by the worker itself, read merged with `[rank N] ` prefixes.

Why one file per rank, opened by the worker: a worker's stdout and stderr *are* the file (`O_APPEND`), not a pipe
read by the scheduler. Once a scheduler that reads a pipe dies (`kill -9`), the worker's next `print` fails with
`BrokenPipeError` and it exits before its checkpoint; a file needs nobody alive to be written. Each launch first
writes one header line (`[pollux] <UTC time> rank R of N on HOST`) so a reader tells the launches apart.

Readers (`pollux logs`, the API, a crashed job's error) merge the rank files: every line prefixed with its rank,
rank by rank within one read. A cursor remembers the byte offset reached in each file (`"0:812,1:640"`).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

RANK_FILE = re.compile(r"^rank-(\d+)\.log$")
MAX_READ_BYTES = 1 << 20  # one merged read returns at most this much of each rank's file


def rank_log_path(log_dir: Path, rank: int) -> Path:
    """Where rank `rank` of the job writes its output."""
    return log_dir / f"rank-{rank}.log"


def open_rank_log(log_dir: Path, rank: int, world_size: int, host: str) -> int:
    """A descriptor appending to the rank's log, its launch header written: the worker's stdout and stderr.
    The caller closes it once the worker holds its own copy. Raises `OSError` when the folder is not writable."""
    log_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(rank_log_path(log_dir, rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    os.write(fd, f"[pollux] {stamp} rank {rank} of {world_size} on {host}\n".encode())
    return fd


def rank_logs(log_dir: Path) -> dict[int, Path]:
    """The rank files of a job, by rank."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return {}
    found = {int(m.group(1)): log_dir / name for name in names if (m := RANK_FILE.match(name))}
    return dict(sorted(found.items()))


def parse_cursor(cursor: str) -> dict[int, int]:
    """`"0:812,1:640"` → {0: 812, 1: 640}; raises `ValueError` on anything else (the API answers 400)."""
    offsets: dict[int, int] = {}
    for part in filter(None, cursor.split(",")):
        rank, _, offset = part.partition(":")
        if not (rank.isdigit() and offset.isdigit()):
            raise ValueError(f"bad log cursor part {part!r}: expected RANK:OFFSET")
        offsets[int(rank)] = int(offset)
    return offsets


def format_cursor(offsets: dict[int, int]) -> str:
    return ",".join(f"{rank}:{offset}" for rank, offset in sorted(offsets.items()))


def read_merged(log_dir: Path, cursor: str = "", *, partial: bool = False) -> tuple[str, str]:
    """The lines written since `cursor`, each prefixed with its rank, and the cursor after them.

    Only whole lines are returned unless `partial` (a worker may be in the middle of one); a line longer than
    `MAX_READ_BYTES` is returned in pieces, so a reader never waits for an endless progress bar."""
    offsets = parse_cursor(cursor)
    out: list[str] = []
    for rank, path in rank_logs(log_dir).items():
        start = offsets.get(rank, 0)
        try:
            with path.open("rb") as handle:
                handle.seek(start)
                data = handle.read(MAX_READ_BYTES)
        except FileNotFoundError:
            continue
        if not partial and len(data) < MAX_READ_BYTES:
            data = data[: data.rfind(b"\n") + 1]  # hold back an unfinished last line
        offsets[rank] = start + len(data)
        prefix = f"[rank {rank}] "
        out.extend(prefix + line + "\n" for line in data.decode("utf-8", errors="replace").splitlines())
    return "".join(out), format_cursor(offsets)


def tail(log_dir: Path, lines: int = 20) -> str:
    """The last lines of every rank's log (at least 5 each, `lines` in all where that allows), prefixed."""
    files = rank_logs(log_dir)
    if not files:
        return "(no log)"
    each = max(lines // len(files), 5)
    out: list[str] = []
    for rank, path in files.items():
        size = path.stat().st_size
        with path.open("rb") as handle:
            handle.seek(max(size - 64 * 1024 * each, 0))
            text = handle.read().decode("utf-8", errors="replace")
        out.extend(f"[rank {rank}] {line}" for line in text.splitlines()[-each:])
    return "\n".join(out)

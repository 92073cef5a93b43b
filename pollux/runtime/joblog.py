"""A job's log: one file per rank, written outside the scheduler, each line stamped with the time it was written;
read merged in time order with `[rank N] ` prefixes.

Why one file per rank, not a pipe to the scheduler: once a scheduler that reads a pipe dies (`kill -9`), the
worker's next `print` fails with `BrokenPipeError` and it exits before its checkpoint; a file needs nobody alive to
be written. Each launch first writes one header line (`[pollux] <UTC time> rank R of N on HOST`) so a reader tells
the launches apart.

Why each line is stamped, and by whom: ranks print at once, and a reader (`pollux logs`, even with the service
down) can only merge their files in time order if every line carries its time. The worker's stdout and stderr are
a pipe to a stamper of its own (`pollux.runtime.logstamp`, a small script, standard library only): it writes the
launch's header, then prefixes every line with the UTC time its first byte arrived (fixed width, so that stamps
sort as text: `2025-01-02T03:04:05.678901Z `) and appends it to the rank's file. The stamper is not the scheduler:
it runs in a session of its own, ignores SIGTERM, SIGINT and SIGHUP, outlives the scheduler and the launcher (a
Ray actor) and ends at the end of its input, once the last process holding the worker's stdout is gone; a worker
checkpointing after the scheduler's `kill -9` still prints into it. The others were weighed: the agent stamping
`sys.stdout` sees only a Python job's own writes (not its C libraries', not the interpreter's last traceback, not
a job without the agent), and a record of write offsets and times needs someone alive beside each worker all the
same. The price is one small process per rank; and a worker's last lines reach the file a moment after it exits,
so the launchers wait for the stampers (`wait_written`) before they report a group's exit. Unstamped lines (a log
written before stamps, a line cut in pieces) take the time of the line before them.

A cursor remembers the byte offset reached in each file (`"0:812,1:640"`).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pollux.runtime import logstamp
from pollux.runtime.logstamp import STAMP, STAMP_BYTES

RANK_FILE = re.compile(r"^rank-(\d+)\.log$")
MAX_READ_BYTES = 1 << 20  # one merged read returns at most this much of each rank's file
STAMPER_WAIT_S = 2.0  # after a worker exits, how long a launcher waits for its last lines to reach the file


@dataclass
class RankLog:
    """One rank's log being written: `fd` is the worker's stdout and stderr (the caller closes it once the worker
    holds its own copy), `stamper` the process that stamps its lines into the file."""

    fd: int
    stamper: subprocess.Popen[bytes]

    def wait_written(self, deadline: float) -> None:
        """Wait (until `time.monotonic()` reaches `deadline`) for the stamper to write the last lines and exit; a
        stamper kept alive longer (a helper of the worker still holds its output) goes on alone."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.stamper.wait(max(deadline - time.monotonic(), 0.0))


def wait_written(logs: list[RankLog], timeout_s: float = STAMPER_WAIT_S) -> None:
    """`RankLog.wait_written` for a whole group, within one timeout."""
    deadline = time.monotonic() + timeout_s
    for log in logs:
        log.wait_written(deadline)


def rank_log_path(log_dir: Path, rank: int) -> Path:
    """Where rank `rank` of the job writes its output."""
    return log_dir / f"rank-{rank}.log"


def open_rank_log(log_dir: Path, rank: int, world_size: int, host: str) -> RankLog:
    """The rank's log opened for a new launch: its header written and its stamper started, appending to the file.
    Raises `OSError` when the folder is not writable or the stamper cannot start."""
    log_dir.mkdir(parents=True, exist_ok=True)
    file_fd = os.open(rank_log_path(log_dir, rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        read_fd, write_fd = os.pipe()  # not inheritable: only the worker gets the write end
        header = f"[pollux] {when} rank {rank} of {world_size} on {host}"
        try:
            stamper = subprocess.Popen(
                # isolated: no site, no folder of ours on the path, no PYTHON* variables
                [sys.executable, "-I", "-S", logstamp.__file__, header],
                stdin=read_fd,
                stdout=file_fd,
                stderr=file_fd,
                start_new_session=True,  # a terminal's Ctrl-C or a killpg of the worker's session never reaches it
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
    finally:
        os.close(file_fd)
    return RankLog(write_fd, stamper)


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


@dataclass(frozen=True)
class _Line:
    at: bytes  # the stamp without its space (b"" before any stamp): sorts as time
    rank: int
    end: int  # the file offset just past the line
    text: str


def _lines(data: bytes, rank: int, start: int) -> list[_Line]:
    """The lines of `data` (read from offset `start` of rank's file), each with its stamp or the one before."""
    lines: list[_Line] = []
    at, offset = b"", start
    for raw in data.splitlines(keepends=True):
        offset += len(raw)
        body = raw.rstrip(b"\r\n")
        if STAMP.match(body):
            at, body = body[: STAMP_BYTES - 1], body[STAMP_BYTES:]
        lines.append(_Line(at, rank, offset, body.decode("utf-8", errors="replace")))
    return lines


def _merged(lines_by_rank: list[list[_Line]]) -> list[_Line]:
    """Every rank's lines in time order (a rank's own lines keep their order; ties go to the lower rank)."""
    return list(heapq.merge(*lines_by_rank, key=lambda line: line.at))


def read_merged(log_dir: Path, cursor: str = "", *, partial: bool = False) -> tuple[str, str]:
    """The lines written since `cursor`, in time order, each prefixed with its rank, and the cursor after them.

    Only whole lines are returned unless `partial` (a worker may be in the middle of one); a line longer than
    `MAX_READ_BYTES` is returned in pieces, so a reader never waits for an endless progress bar. Where a rank has
    more than one read's worth left, the other ranks' lines after its last one read wait for the next read, so
    that a long log comes out in time order read after read."""
    offsets = parse_cursor(cursor)
    lines_by_rank: list[list[_Line]] = []
    horizon: bytes | None = None  # the earliest last line of a rank that has more to read
    for rank, path in rank_logs(log_dir).items():
        start = offsets.get(rank, 0)
        try:
            with path.open("rb") as handle:
                handle.seek(start)
                data = handle.read(MAX_READ_BYTES)
        except FileNotFoundError:
            continue
        more = len(data) == MAX_READ_BYTES
        cut = data.rfind(b"\n") + 1
        if not partial and (cut or not more):
            data = data[:cut]  # hold back an unfinished last line, unless it fills the whole read
        lines = _lines(data, rank, start)
        lines_by_rank.append(lines)
        if more and lines and (horizon is None or lines[-1].at < horizon):
            horizon = lines[-1].at
    if horizon is not None:
        until = horizon
        lines_by_rank = [list(itertools.takewhile(lambda line: line.at <= until, ls)) for ls in lines_by_rank]
    out: list[str] = []
    for line in _merged(lines_by_rank):
        offsets[line.rank] = line.end
        out.append(f"[rank {line.rank}] {line.text}\n")
    return "".join(out), format_cursor(offsets)


def tail(log_dir: Path, lines: int = 20) -> str:
    """The last lines of every rank's log (at least 5 each, `lines` in all where that allows), prefixed, in time
    order."""
    files = rank_logs(log_dir)
    if not files:
        return "(no log)"
    each = max(lines // len(files), 5)
    lines_by_rank: list[list[_Line]] = []
    for rank, path in files.items():
        size = path.stat().st_size
        with path.open("rb") as handle:
            start = max(size - 64 * 1024 * each, 0)
            handle.seek(start)
            lines_by_rank.append(_lines(handle.read(), rank, start)[-each:])
    return "\n".join(f"[rank {line.rank}] {line.text}" for line in _merged(lines_by_rank))

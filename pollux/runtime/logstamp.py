"""The stamper between a worker and its rank's log file (`pollux.runtime.joblog` says why it exists): run as
`python -I -S logstamp.py HEADER` with the worker's output on stdin and the log file (append mode) on stdout, it
writes the launch's header line, then every line it reads, each prefixed with the UTC time its first byte arrived,
until its input ends. Standard library only and small, so that it is up before the worker prints."""

from __future__ import annotations

import os
import re
import signal
import sys
import time

STAMP = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z ")  # fixed width: stamps sort as text in time order
STAMP_BYTES = len(b"2025-01-02T03:04:05.678901Z ")


def stamp(now: float) -> bytes:
    """The prefix of a line first seen at `now` (seconds since the epoch)."""
    micros = min(int(now % 1 * 1e6), 999_999)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)).encode() + b".%06dZ " % micros


def stamp_lines(chunk: bytes, at_line_start: bool, mark: bytes) -> tuple[bytes, bool]:
    """`chunk` with `mark` before every line that starts in it, and whether the next chunk starts a line."""
    out: list[bytes] = []
    pieces = chunk.split(b"\n")
    for piece in pieces[:-1]:
        out.extend((mark, piece, b"\n") if at_line_start else (piece, b"\n"))
        at_line_start = True
    if pieces[-1]:
        out.extend((mark, pieces[-1]) if at_line_start else (pieces[-1],))
        at_line_start = False
    return b"".join(out), at_line_start


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def main(header: str) -> None:
    """Write the header, then copy stdin to stdout stamping each line, until the input ends."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # the worker's fate decides when this ends, never a signal to it
    _write_all(stamp(time.time()) + header.encode() + b"\n")
    at_line_start = True
    while chunk := os.read(0, 1 << 16):
        data, at_line_start = stamp_lines(chunk, at_line_start, stamp(time.time()))
        _write_all(data)
    if not at_line_start:
        _write_all(b"\n")  # end the worker's unfinished last line: the next launch's header starts a line of its own


if __name__ == "__main__":
    main(sys.argv[1])

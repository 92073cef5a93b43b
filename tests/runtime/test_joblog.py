"""A job's log is one file per rank, read merged with rank prefixes, in whole lines, from a cursor."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pollux.runtime import joblog


def write(log_dir: Path, rank: int, text: str) -> None:
    with joblog.rank_log_path(log_dir, rank).open("a") as handle:
        handle.write(text)


def test_a_merged_read_prefixes_each_line_and_resumes_at_its_cursor(tmp_path: Path) -> None:
    for rank in (0, 1):
        os.close(joblog.open_rank_log(tmp_path, rank, 2, "host-a"))
        write(tmp_path, rank, f"one {rank}\n")
    text, cursor = joblog.read_merged(tmp_path)
    assert text.splitlines()[1::2] == ["[rank 0] one 0", "[rank 1] one 1"]
    assert text.splitlines()[0].startswith("[rank 0] [pollux] ") and text.splitlines()[0].endswith("on host-a")
    write(tmp_path, 1, "two 1\nunfinished")
    text, cursor = joblog.read_merged(tmp_path, cursor)
    assert text == "[rank 1] two 1\n"  # the unfinished line waits for its newline
    assert joblog.read_merged(tmp_path, cursor) == ("", cursor)
    assert joblog.read_merged(tmp_path, cursor, partial=True)[0] == "[rank 1] unfinished\n"


def test_a_line_longer_than_one_read_comes_in_pieces(tmp_path: Path) -> None:
    # a progress bar redrawn with "\r" never ends its line: a reader must not wait for it forever
    write(tmp_path, 0, "x" * (joblog.MAX_READ_BYTES + 10) + "\nend\n")
    first, cursor = joblog.read_merged(tmp_path)
    second, cursor = joblog.read_merged(tmp_path, cursor)
    assert first == "[rank 0] " + "x" * joblog.MAX_READ_BYTES + "\n"
    assert second == "[rank 0] " + "x" * 10 + "\n[rank 0] end\n"


def test_a_bad_cursor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="RANK:OFFSET"):
        joblog.read_merged(tmp_path, "0:12,zero:3")


def test_the_tail_takes_the_last_lines_of_every_rank(tmp_path: Path) -> None:
    assert joblog.tail(tmp_path) == "(no log)"
    for rank in (0, 1):
        write(tmp_path, rank, "".join(f"line {i}\n" for i in range(100)))
    lines = joblog.tail(tmp_path, lines=20).splitlines()
    assert lines == [f"[rank {r}] line {i}" for r in (0, 1) for i in range(90, 100)]

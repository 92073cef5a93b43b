"""A job's log is one file per rank, read merged with rank prefixes, in whole lines, from a cursor."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from runtime_jobs import wait_for

from pollux.runtime import joblog, logstamp


def write(log_dir: Path, rank: int, text: str) -> None:
    with joblog.rank_log_path(log_dir, rank).open("a") as handle:
        handle.write(text)


def test_a_merged_read_prefixes_each_line_and_resumes_at_its_cursor(tmp_path: Path) -> None:
    for rank in (0, 1):
        log = joblog.open_rank_log(tmp_path, rank, 2, "host-a")
        os.close(log.fd)
        joblog.wait_written([log])
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


def test_every_line_is_stamped_as_it_arrives_and_ranks_merge_in_time_order(tmp_path: Path) -> None:
    logs = [joblog.open_rank_log(tmp_path, rank, 2, "host-a") for rank in (0, 1)]
    for rank in (0, 1):  # the header is the stamper's first line: it stamps what comes from now on
        wait_for(joblog.rank_log_path(tmp_path, rank).read_bytes, 30, "the stamper to start")
    for rank, text in [(1, b"first\n"), (0, b"second, in two "), (0, b"writes\n"), (1, b"third\nunfinished")]:
        os.write(logs[rank].fd, text)  # what a worker prints, in this order, across its two ranks
        time.sleep(0.01)
    for log in logs:
        os.close(log.fd)
    joblog.wait_written(logs)
    raw = joblog.rank_log_path(tmp_path, 1).read_bytes().splitlines()
    assert all(logstamp.STAMP.match(line) for line in raw) and len(raw) == 4  # the unfinished line was ended
    text, _ = joblog.read_merged(tmp_path)
    assert [line for line in text.splitlines() if "[pollux]" not in line] == [
        "[rank 1] first",
        "[rank 0] second, in two writes",
        "[rank 1] third",
        "[rank 1] unfinished",
    ]


def test_a_long_read_holds_back_the_other_ranks_later_lines(tmp_path: Path) -> None:
    # rank 0 has more than one read's worth: rank 1's line from after rank 0's last line read waits for the next
    long_line = b"y" * 1000
    lines = [logstamp.stamp(100.0 + i) + long_line + b"\n" for i in range(2 * joblog.MAX_READ_BYTES // 1000)]
    joblog.rank_log_path(tmp_path, 0).write_bytes(b"".join(lines))
    early, late = logstamp.stamp(100.5) + b"early\n", logstamp.stamp(5000.0) + b"late\n"
    joblog.rank_log_path(tmp_path, 1).write_bytes(early + late)
    first, cursor = joblog.read_merged(tmp_path)
    assert "[rank 1] early" in first and "late" not in first
    assert first.splitlines()[1] == "[rank 1] early"  # between rank 0's first two lines
    text = first
    while more := joblog.read_merged(tmp_path, cursor):
        if not more[0]:
            break
        text, cursor = text + more[0], more[1]
    assert text.splitlines()[-1] == "[rank 1] late"
    assert text.count("[rank 0] ") == len(lines)


def test_a_stamp_sorts_as_text_in_time_order() -> None:
    times = [0.0, 0.9999999, 1.0, 59.5, 1e9, 1e9 + 0.000001, 2e9]
    stamps = [logstamp.stamp(t) for t in times]
    assert stamps == sorted(stamps) and {len(s) for s in stamps} == {logstamp.STAMP_BYTES}
    assert all(logstamp.STAMP.match(s) for s in stamps)

"""`pollux ls`'s table fits its width with one line per job: names, statuses and goodput whole, the note cut."""

from __future__ import annotations

import itertools

from rich.console import Console

from pollux.runtime.listing import age, compact, job_table

LONG_ERROR = "exit 3\n" + "\n".join(f"[rank 0] Traceback line {i} " + "word " * 40 for i in range(8))


def row(name: str, status: str, **fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "name": name,
        "status": status,
        "gpus": 0,
        "gpu_type": None,
        "placement": [],
        "batch_size": None,
        "epoch": None,
        "goodput": None,
        "restarts": 0,
        "age_s": 30.0,
        "reason": "",
        "last_error": None,
    }
    return {**base, **fields}


ROWS = [
    row("digits-00", "completed", batch_size=512, epoch=2, goodput=19234.5, age_s=400.0),
    row("digits-01", "failed", last_error=LONG_ERROR, restarts=2),
    row("digits-02", "running", gpus=4, gpu_type="a100", placement=[2, 2], batch_size=1024, epoch=1, goodput=1923.4),
    row("digits-03", "pending", reason="waiting for GPUs: " + "the cluster is full of other jobs " * 5),
    row("digits-04", "cancelled", age_s=90000.0),
]


def render(width: int) -> list[str]:
    table, needed = job_table(ROWS, width)
    console = Console(width=needed, markup=False, emoji=False, highlight=False)  # as `pollux ls` prints it
    with console.capture() as capture:
        console.print(table)
    return capture.get().splitlines()


def test_at_80_columns_every_job_is_one_line_with_its_name_status_and_goodput_whole():
    lines = render(80)
    assert len(lines) == 1 + len(ROWS) and all(len(line) <= 80 for line in lines), "\n".join(lines)
    for line, job in zip(lines[1:], ROWS, strict=True):
        assert line.split()[:2] == [job["name"], job["status"]], line
    assert "19.2k" in lines[1] and "1.92k" in lines[3]
    assert lines[2].rstrip().endswith("…") and "exit 3: [rank 0] Trace" in lines[2]  # the error's first: last line
    assert lines[4].rstrip().endswith("…") and "waiting for GPUs" in lines[4]
    assert lines[0].split()[-1] == "note"


def test_wide_enough_every_column_shows_and_narrower_the_least_read_go_first():
    wide = render(400)
    assert wide[0].split() == [
        "job", "status", "GPUs", "type", "placement", "batch", "epoch", "goodput", "restarts", "age", "note"
    ]  # fmt: skip
    assert "a100" in wide[3] and "2x2" in wide[3] and LONG_ERROR.splitlines()[-1].strip() in wide[2]
    assert len(wide) == 1 + len(ROWS)
    headers = [render(width)[0].split() for width in (150, 110, 100, 90, 80, 40)]
    for wider, narrower in itertools.pairwise(headers):
        assert set(narrower) <= set(wider)
    assert {"job", "status", "GPUs", "goodput", "restarts"} <= set(headers[-1])  # never dropped nor cut, even at 40
    assert all(line.split()[1] == job["status"] for line, job in zip(render(40)[1:], ROWS, strict=True))


def test_numbers_are_short():
    assert [compact(v) for v in (0.0, 1.234, 19.23, 192.3, 999.4, 999.6, 19234.5, 1.5e6)] == [
        "0", "1.23", "19.2", "192", "999", "1k", "19.2k", "1.5M"
    ]  # fmt: skip
    assert [age(s) for s in (5, 119, 600, 7199, 9000, 200_000)] == ["5s", "119s", "10m", "120m", "2.5h", "2.3d"]

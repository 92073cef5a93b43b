"""`pollux ls` as a table that fits its width: one line per job at any load, whatever a job's note says.

The columns a reader scans for (job, status, GPUs, goodput, restarts) are never cut: they take the width their
longest cell needs. The note (why a job waits, how it crashed) takes what is left and is cut to one line with `…`
(`pollux ls NAME` shows it whole). Where a note of `NOTE_MIN` characters would not fit, the columns that matter
least go first: placement, GPU type, epoch, batch, age. Numbers are short by their format: goodput `192`, `19.2k`;
age `42s`, `7m`, `3.5h`, `2.1d`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

GAP = 2  # spaces between two columns
NOTE_MIN = 24  # the narrowest note worth dropping a column for
NOTE_FLOOR = 10  # the narrowest note shown at all (where long names leave no more)


def age(seconds: float) -> str:
    """A job's age in one unit, 2-4 characters."""
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86_400:.1f}d"


def compact(value: float) -> str:
    """A rate in at most 5 characters: 3 significant digits, then k, M, G or T (goodput in examples/s)."""
    for unit in ("", "k", "M", "G"):
        if abs(value) < 999.5:
            return f"{value:.3g}{unit}"
        value /= 1000
    return f"{value:.3g}T"


def note(row: dict[str, Any]) -> str:
    """Why a pending job waits, else how the job last crashed: the error's first line (`exit 3`) and its last, the
    log's final words (the exception), which the first alone never shows."""
    if row["reason"]:
        return str(row["reason"])
    lines = [line for line in (row["last_error"] or "").splitlines() if line.strip()]
    return ": ".join(lines[:1] + lines[1:][-1:])  # "", the only line, or first: last


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


@dataclass(frozen=True)
class _Column:
    header: str
    cell: Callable[[dict[str, Any]], str]
    right: bool = True


# in the order shown; the job's name, status, GPUs, goodput and restarts are never dropped nor cut
_COLUMNS = (
    _Column("job", lambda row: str(row["name"]), right=False),
    _Column("status", lambda row: str(row["status"]), right=False),
    _Column("GPUs", lambda row: str(row["gpus"])),
    _Column("type", lambda row: row.get("gpu_type") or "-"),
    _Column("placement", lambda row: "x".join(map(str, row["placement"])) or "-"),
    _Column("batch", lambda row: _dash(row["batch_size"])),
    _Column("epoch", lambda row: _dash(row["epoch"])),
    _Column("goodput", lambda row: "-" if row["goodput"] is None else compact(row["goodput"])),
    _Column("restarts", lambda row: str(row["restarts"])),
    _Column("age", lambda row: age(row["age_s"])),
)
_DROPPED_FIRST = ("placement", "type", "epoch", "batch", "age")
_TENANT = _Column("tenant", lambda row: str(row.get("tenant") or "-"), right=False)  # where there are several
_EXPERIMENT = _Column("experiment", lambda row: str(row.get("experiment") or "-"), right=False)  # where there is one


def grouped(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with each experiment's trial jobs together, where its first job is; other jobs stay in place."""
    first: dict[str, int] = {}
    place = [first.setdefault(row["experiment"], i) if row.get("experiment") else i for i, row in enumerate(rows)]
    return [rows[i] for i in sorted(range(len(rows)), key=lambda i: (place[i], i))]


def job_table(rows: list[dict[str, Any]], width: int, tenant_column: bool = False) -> tuple[Table, int]:
    """The jobs' table and the width it takes: `width`, unless the columns that are never cut need more. With
    `tenant_column` (a cluster of several tenants), each job's tenant after its name; where a job is a trial of an
    experiment (`pollux tune`), each job's experiment after that."""
    columns = [_COLUMNS[0], _TENANT, *_COLUMNS[1:]] if tenant_column else list(_COLUMNS)
    if any(row.get("experiment") for row in rows):
        columns.insert(2 if tenant_column else 1, _EXPERIMENT)
    cells = {c.header: [c.cell(row) for row in rows] for c in columns}
    notes = [" ".join(note(row).split()) for row in rows]  # one line, whatever the error's layout
    widths = {h: max([cell_len(h), *map(cell_len, column)]) for h, column in cells.items()}
    shown = columns
    has_note = any(notes)

    def used() -> int:
        return sum(widths[c.header] for c in shown) + GAP * (len(shown) - 1)

    for header in _DROPPED_FIRST:
        if not has_note or used() + GAP + NOTE_MIN <= width:
            break
        shown = [c for c in shown if c.header != header]
    note_width = width - used() - GAP
    table = Table(box=None, padding=(0, GAP // 2), pad_edge=False, show_edge=False, header_style="bold")
    for c in shown:
        table.add_column(c.header, justify="right" if c.right else "left", no_wrap=True, width=widths[c.header])
    with_note = has_note and note_width >= NOTE_FLOOR
    if with_note:
        longest = max(cell_len("note"), *map(cell_len, notes))
        table.add_column("note", no_wrap=True, overflow="ellipsis", width=min(note_width, longest))
    for i, text in enumerate(notes):
        table.add_row(*(Text(cells[c.header][i]) for c in shown), *([Text(text)] if with_note else []))
    return table, max(width, used())


def tenant_lines(usage: dict[str, Any]) -> list[str]:
    """One line per tenant (`GET /v1/tenants`): per GPU type it holds, is guaranteed or has a budget on, the GPUs it
    holds against this round's budget and its guarantee, e.g. `tenant vision: a100 6 held / budget 6 / guaranteed
    4; 2 running, 1 pending`. None without a tenants file."""
    rows = usage.get("tenants") or []
    width = max((cell_len(t["name"]) for t in rows), default=0)
    lines = []
    for tenant in rows:
        quotas = [
            f"{gpu_type} {q['held']} held / budget {q['budget']} / guaranteed {q['guaranteed']}"
            for gpu_type, q in tenant["types"].items()
            if q["held"] or q["budget"] or q["guaranteed"]
        ]
        jobs = f"{tenant['jobs_running']} running, {tenant['jobs_pending']} pending"
        name = tenant["name"] + ":" + " " * (width - cell_len(tenant["name"]))
        lines.append(f"tenant {name} {'; '.join(quotas) or 'no GPUs'}; {jobs}")
    return lines


def experiment_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per experiment among the rows: its trial jobs by status, e.g. `experiment hpo: 6 trial job(s):
    2 running, 3 completed, 1 cancelled`."""
    statuses: dict[str, dict[str, int]] = {}
    for row in rows:
        if row.get("experiment"):
            counts = statuses.setdefault(str(row["experiment"]), {})
            counts[str(row["status"])] = counts.get(str(row["status"]), 0) + 1
    return [
        f"experiment {name}: {sum(counts.values())} trial job(s): "
        + ", ".join(f"{n} {status}" for status, n in counts.items())
        for name, counts in statuses.items()
    ]


def history_table(detail: dict[str, Any]) -> Table:
    """One job's status history (`pollux ls NAME`): every change with its reason, whole."""
    table = Table(title=f"{detail['name']}: {detail['status']}, {detail['restarts']} restart(s)")
    for column in ("at", "status", "reason"):
        table.add_column(column)
    for entry in detail["history"]:
        at = time.strftime("%H:%M:%S", time.localtime(entry["at"]))
        table.add_row(Text(at), Text(entry["status"]), Text(entry["reason"]))
    return table

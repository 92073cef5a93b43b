"""`pollux rm`: a finished job removed, so that its name can be used again, by the service (`POST
/v1/jobs/NAME/remove`) or, while none runs, straight in the state directory.

What goes and what stays: the job's rows leave the store, but its history stays in the store's `events` table, with
a `removed` event holding its final status (`StateStore.remove_job`). Its state folder (`jobs/NAME/`: rank logs,
report, the checkpoints of a spec without its own `checkpoint_dir`) is deleted, not archived: a new job of that
name must start from nothing, and old logs and checkpoints are what fill a disk. A `checkpoint_dir` a spec names is
the user's folder and is left alone (a new job naming it resumes from it).

Order, for a process killed half-way: the folder is first renamed aside (one atomic step), then the rows go in one
transaction, then the folder is deleted. Killed after the rename, the job is still listed, without its logs, and
`pollux rm` finishes the work; killed after the transaction, a hidden `jobs/.removed-*` folder is left, which the
next removal deletes. A new job of the name never finds the old job's files.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import time

from pollux.runtime.config import ServiceConfig
from pollux.runtime.status import JobStatus, check_removable
from pollux.runtime.store import StateStore

_ASIDE = ".removed-"


def remove_job(store: StateStore, config: ServiceConfig, name: str, now: float | None = None) -> JobStatus:
    """Remove the finished job `name` (store rows and state folder); its final status. A job that may still run
    is refused with a `TransitionError` (cancel it first), an unknown one with an `UnknownJobError`."""
    check_removable(name, store.job(name).status)  # a finished job stays finished: the check holds from here on
    folder = config.job_dir(name)
    for stale in folder.parent.glob(f"{_ASIDE}*"):  # left by a removal that was killed half-way
        shutil.rmtree(stale, ignore_errors=True)
    aside = folder.with_name(f"{_ASIDE}{name}-{secrets.token_hex(4)}")
    with contextlib.suppress(FileNotFoundError):  # a job that never launched may have no folder
        folder.rename(aside)
    status = store.remove_job(name, time.time() if now is None else now)
    shutil.rmtree(aside, ignore_errors=True)
    return status

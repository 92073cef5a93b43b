"""What `pollux ls` and `pollux logs` show, and what `pollux rm` does, while no scheduler runs, straight in the state
directory: the jobs outlive the service (docs/design.md, "The runtime"), so reading or removing them must not need it.

The rows come from the API's own `job_row` (`pollux.runtime.views`), so both views print the same columns the same
way; only a live service's word is missing, and a pending job's note is then the reason stored with its last status
change."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from pollux.agent.report import JobReport
from pollux.runtime import joblog
from pollux.runtime.config import ServiceConfig
from pollux.runtime.removal import remove_job
from pollux.runtime.store import StateStore
from pollux.runtime.views import job_row

if TYPE_CHECKING:
    from pollux.runtime.service import Service  # typing only: the offline `pollux ls` needs no scheduler


class _StoredService:
    """The two questions `job_row` asks a service, answered from the store."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def report(self, name: str) -> JobReport | None:
        return self.store.report_of(name)

    def reason(self, name: str) -> str:
        history = self.store.history(name)
        return history[-1][2] if history else ""


def stored_jobs(database: Path, now: float) -> list[dict[str, Any]]:
    """Every job as `GET /v1/jobs` would list it."""
    store = StateStore(database)
    try:
        view = cast("Service", _StoredService(store))
        return [job_row(view, state, now) for state in store.jobs()]
    finally:
        store.close()


def stored_job(database: Path, name: str, now: float) -> dict[str, Any]:
    """One job as `GET /v1/jobs/NAME` would show it: its row, status history and last report."""
    store = StateStore(database)
    try:
        state = store.job(name)
        return {
            **job_row(cast("Service", _StoredService(store)), state, now),
            "history": [{"at": at, "status": s, "reason": r} for at, s, r in store.history(name)],
            "report": store.report(name),
        }
    finally:
        store.close()


class StoredLog:
    """A job's status and rank logs read from its state directory (`pollux logs`): the workers write their logs
    there themselves, so they are whole whether a scheduler runs or not."""

    def __init__(self, state_dir: Path, name: str) -> None:
        config = ServiceConfig(state_dir)
        self.store = StateStore(config.database)
        try:
            self.name = self.store.job(name).name  # an unknown name is refused, as the API refuses it
        except BaseException:
            self.store.close()
            raise
        self.log_dir = config.log_dir(name)

    def status(self) -> str:
        return str(self.store.job(self.name).status)

    def read(self, cursor: str, partial: bool) -> tuple[str, str]:
        """`joblog.read_merged`: the lines since `cursor`, in time order, and the cursor after them."""
        return joblog.read_merged(self.log_dir, cursor, partial=partial)

    def close(self) -> None:
        self.store.close()


def remove_stored(state_dir: Path, name: str) -> dict[str, Any]:
    """`POST /v1/jobs/NAME/remove` without a service (`pollux.runtime.removal`); the caller holds the state dir."""
    config = ServiceConfig(state_dir)
    store = StateStore(config.database)
    try:
        return {"name": name, "status": remove_job(store, config, name)}
    finally:
        store.close()

"""How the scheduler service schedules, how patient it is with jobs, and where it keeps its files."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pollux.autoscale import WINDOW_ROUNDS
from pollux.cluster import Cluster
from pollux.data.philly import philly_service_samples
from pollux.defaults import LEASE_MIN_RUN_S, RESTART_DELAY_S, ROUND_INTERVAL_S, STOP_GRACE_S
from pollux.errors import SpecError
from pollux.lease import Lease
from pollux.policies.base import Policy
from pollux.policies.registry import PolicySettings, make_policy, policy_class
from pollux.runtime.spec import NAME_PATTERN, JobSpec
from pollux.tenants import Tenants, parse_tenants, read_tenants

TENANTS_RECORD = "tenants.json"  # in the state dir: the tenants of the last `pollux up --tenants FILE` on it


@dataclass(frozen=True)
class ServiceConfig:
    """How the service schedules and how patient it is with jobs."""

    state_dir: Path
    policy: str = "pollux"
    interval_s: float = float(ROUND_INTERVAL_S)  # seconds between rounds when nothing happens
    restart_delay_s: float = float(RESTART_DELAY_S)  # δ of Pollux's re-allocation factor: what a restart costs a job
    stop_grace_s: float = STOP_GRACE_S  # after SIGTERM, how long a job may take to checkpoint before SIGKILL
    max_attempts: int = 3  # crashed launches before a job is marked failed
    backoff_s: float = 5.0  # wait before the first retry of a crashed job; doubles per crash
    checkpoint_interval_s: float | None = None  # jobs' periodic checkpoints (a spec may override); None: automatic
    tick_s: float = 0.25  # how often worker groups and reports are polled
    autoscale_window_rounds: int = WINDOW_ROUNDS  # rounds of utility averaged before a resize (pollux.autoscale)
    lease_s: float | None = LEASE_MIN_RUN_S  # a job started or moved trains this long after its restore before it
    # may be moved again (`pollux.lease`); None: the paper's Pollux
    tenants_file: Path | None = None  # `--tenants FILE`: the teams and their GPU quotas (`service_tenants`)

    @property
    def lease(self) -> Lease | None:
        return None if self.lease_s is None else Lease(self.lease_s, self.restart_delay_s)

    @property
    def database(self) -> Path:
        return self.state_dir / "state.db"

    @property
    def tenants_record(self) -> Path:
        return self.state_dir / TENANTS_RECORD

    def job_dir(self, name: str) -> Path:
        return self.state_dir / "jobs" / name

    def log_dir(self, name: str) -> Path:
        """The job's rank logs (`pollux.runtime.joblog`)."""
        return self.job_dir(name) / "logs"

    def report_path(self, name: str) -> Path:
        return self.job_dir(name) / "report.json"

    def metrics_path(self, name: str) -> Path:
        """Where the job's script appends its own metrics (`pollux.agent.metrics`)."""
        return self.job_dir(name) / "metrics.jsonl"

    def checkpoint_dir(self, spec: JobSpec) -> Path:
        """Where the job's agent saves: its spec's folder, else one in the job's state folder."""
        return spec.checkpoint_dir or self.job_dir(spec.name) / "checkpoints"

    def checkpoint_interval_of(self, spec: JobSpec) -> float | None:
        """The job's periodic checkpoint interval: its own, else the service's, else None (the agent's automatic)."""
        return spec.checkpoint_interval_s if spec.checkpoint_interval_s is not None else self.checkpoint_interval_s


def make_runtime_policy(name: str, restart_delay_s: float = float(RESTART_DELAY_S)) -> Policy:
    """The named policy, configured for real jobs: no simulator-only knowledge (true step times), and no discount
    on a waiting job's start (rounds run when a job arrives or its back-off ends, where the artifact's discount is
    ~0). A policy that owns the jobs' batch sizes cannot run real jobs: their agents choose them."""
    if policy_class(name).batch_owner == "policy":
        raise SpecError(
            f"policy {name!r} chooses batch sizes for the jobs, which the runtime's agent takes from its own goodput "
            "model; use pollux, fifo, tiresias, tiresias-gittins or optimus"
        )
    settings = PolicySettings(restart_delay_s=restart_delay_s, discount_starts=False)
    return make_policy(name, settings, {"gittins_service_samples": philly_service_samples})


def service_tenants(config: ServiceConfig, cluster: Cluster) -> Tenants | None:
    """The service's tenants, checked against `cluster` (the most it can offer). A `--tenants FILE` given wins: it is
    read and recorded in the state dir, replacing what was recorded, so a restarted service (even after kill -9)
    keeps the same tenants without being told again; else the recorded tenants; else None (no tenants file ever:
    one tenant owning everything, and no quota layer)."""
    record = config.tenants_record
    if config.tenants_file is not None:
        tenants = read_tenants(config.tenants_file, cluster)
        _check_names(tenants, str(config.tenants_file))
        data = {"source": str(config.tenants_file.resolve()), "tenants": tenants_data(tenants)}
        tmp = record.with_name(f".{record.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        tmp.replace(record)  # atomic: a restart reads the old record or the new one, never half of one
        return tenants
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SpecError(f"{record}: unreadable ({error}); give `pollux up --tenants FILE` again") from None
    where = f"tenants recorded in {record} (from {data.get('source')}; `pollux up --tenants FILE` replaces them)"
    tenants = parse_tenants(data.get("tenants") or {}, cluster, where=where)
    _check_names(tenants, where)
    return tenants


def tenants_data(tenants: Tenants) -> dict[str, Any]:
    """`tenants` as the tables of a tenants file (`parse_tenants` reads them back to the same `Tenants`)."""
    return {
        "usage_half_life_h": tenants.usage_half_life_s / 3600,
        "tenant": [
            {
                "name": t.name,
                "weight": t.weight,
                "guaranteed": dict(t.guaranteed),
                "max": dict(t.max_gpus),
                "borrow": t.borrow,
            }
            for t in tenants.tenants
        ],
    }


def _check_names(tenants: Tenants, where: str) -> None:
    """A tenant a job spec cannot name (its `tenant` field is a name like a job's) could never have a job."""
    for name in tenants.names:
        if not NAME_PATTERN.match(name):
            raise SpecError(
                f"{where}: tenant {name!r}: a runtime tenant's name is lowercase letters, digits and '-' (1-63 "
                "characters), as a job spec's tenant field; rename it"
            )

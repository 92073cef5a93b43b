"""Workloads with tenants: Philly's virtual clusters as teams, and the `flood` scenario (docs/design.md, "Tenants").

`philly_vc_workload` samples jobs exactly as `generate_workload` does (same seed, same jobs) and keeps each sampled
trace job's virtual cluster (the trace's `cluster` column: Philly's teams) as its tenant. Guarantees follow the
VCs' shares of the sampled GPU-time (the trace's GPUs × duration of each job): on every GPU type t of the cluster,
VC i is guaranteed floor(share_i × capacity_t), so the guarantees never add up to more than a type holds; weight 1,
borrowing allowed. A VC whose share rounds to no GPU keeps its name and a guarantee of 0: it only borrows. Merging
such VCs into one "other" tenant would give that tenant a guarantee none of its teams earned and make their jobs
compete as one team, and the tenant column would no longer say which team a job came from.

Both draw requests only among the tuned choices that fit: Philly-VC jobs at most the GPUs of the cluster's largest
type (a job holds one type; on the 64-GPU T4 cluster every choice fits and the jobs are `generate_workload`'s to
the byte, on `sia-heterogeneous` imagenet's 32- and 48-GPU choices do not), flood jobs at most one tenant's
guarantee on that type (so each tenant's jobs can also run alone on its half: imagenet's 48 GPUs do not fit 32).

`flood_workload` is the issue's scenario: tenant `a` submits 100 jobs at time 0, tenant `b` 10 jobs over the first
two hours (one every 12 minutes, the first at 6 minutes), with equal guarantees (half of every type: 32 + 32 on
the 16 × 4 T4 cluster). The jobs are the generator's own (Philly-derived applications and tuned requests, drawn
from the default 8-hour window by seed), so the mix is realistic; the draw order, which is random, decides which
110 draws go to `a` (the first 100) and to `b` (the last 10).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from pollux.cluster import Cluster
from pollux.defaults import GENERATE_START_HOUR
from pollux.errors import SpecError, TraceError
from pollux.sim.generate import ConfigChoices, Source, named_in_submission_order, sample_jobs, tuned_configurations
from pollux.sim.workload import Workload
from pollux.tenants import Tenant, Tenants

# Tenant names that every part of Pollux accepts (file, CSV column, `pollux tenant add`, URLs): the strictest rule
# of the project's names, that of GPU types.
TENANT_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")

FLOOD_TENANTS = ("a", "b")
FLOOD_JOBS = (100, 10)  # jobs of `a` (all at time 0) and of `b`
FLOOD_SPAN_S = 2 * 3600  # `b` submits over the first two hours
FLOOD_SAMPLE_HOURS = 8.0  # the window the job mix is drawn from: the artifact's


@dataclass(frozen=True)
class TenantWorkload:
    """A workload whose jobs each belong to a tenant, the tenants they belong to, and a line saying how."""

    workload: Workload  # each job with its tenant (`WorkloadJob.tenant`)
    tenants: Tenants
    about: str  # how the guarantees were chosen, written at the top of the tenants file

    @property
    def tenant_of(self) -> dict[str, str]:
        """Job name -> tenant name."""
        return {job.name: job.tenant for job in self.workload.jobs}


def philly_vc_workload(
    num_jobs: int,
    hours: float,
    seed: int,
    cluster: Cluster,
    load: float = 1.0,
    data_dir: Path | None = None,
    *,
    start_hour: int = GENERATE_START_HOUR,
    configs: ConfigChoices | None = None,
) -> TenantWorkload:
    """`generate_workload`'s jobs from the Philly trace, each of its trace job's VC, with guarantees by GPU-time."""
    largest = max(cluster.gpus_of_type(t) for t in cluster.gpu_types)
    fitting = requests_up_to(largest, configs)
    sample = sample_jobs(num_jobs, hours, seed, load, data_dir, start_hour=start_hour, configs=fitting, source="trace")
    assert sample.trace is not None and sample.trace_rows is not None  # source="trace" or an error
    vcs = sample.trace.virtual_cluster
    if vcs is None:
        raise TraceError(f"{sample.trace.path}:1: no 'cluster' column; --tenants philly takes each job's VC from it")
    names = [str(vc) for vc in vcs[sample.trace_rows]]
    for name in names:
        if not TENANT_NAME.match(name):
            raise TraceError(
                f"{sample.trace.path}: virtual cluster {name!r} is not a valid tenant name "
                f"(lower-case letters, digits, '.', '_', '-', at most 64)"
            )
    gpu_time_s: dict[str, float] = {}
    for name, seconds in zip(names, sample.trace.gpu_time_s[sample.trace_rows], strict=True):
        gpu_time_s[name] = gpu_time_s.get(name, 0.0) + float(seconds)
    jobs = tuple(replace(job, tenant=name) for job, name in zip(sample.jobs, names, strict=True))
    workload = Workload(name=sample.name, jobs=jobs, source=sample.source)
    about = (
        f"Tenants of {workload.name}: the Philly trace's virtual clusters; guaranteed = floor(share of the sampled "
        f"GPU-time × the GPUs of each type) on {cluster.describe()}; a VC under one GPU's share only borrows."
    )
    return TenantWorkload(workload, guarantees_by_share(gpu_time_s, cluster), about)


def guarantees_by_share(gpu_time_s: Mapping[str, float], cluster: Cluster) -> Tenants:
    """One tenant per key, largest GPU-time first (ties by name), guaranteed floor(share × capacity) of every type."""
    total = sum(gpu_time_s.values())
    if not gpu_time_s or total <= 0:
        raise SpecError("guarantees by GPU-time share need at least one tenant with GPU-time > 0")
    order = sorted(gpu_time_s, key=lambda name: (-gpu_time_s[name], name))
    return Tenants(
        tuple(
            Tenant(
                name,
                guaranteed={
                    t: math.floor(gpu_time_s[name] / total * cluster.gpus_of_type(t) + 1e-9) for t in cluster.gpu_types
                },
            )
            for name in order
        )
    )


def flood_workload(
    seed: int,
    cluster: Cluster,
    data_dir: Path | None = None,
    *,
    source: Source = "auto",
    configs: ConfigChoices | None = None,
) -> TenantWorkload:
    """The `flood` scenario (module docstring): `a` floods at time 0, `b` trickles in; equal guarantees."""
    flood, steady = FLOOD_JOBS
    halves = {t: cluster.gpus_of_type(t) // 2 for t in cluster.gpu_types}
    fitting = requests_up_to(max(halves.values()), configs)
    sample = sample_jobs(flood + steady, FLOOD_SAMPLE_HOURS, seed, data_dir=data_dir, configs=fitting, source=source)
    gap_s = FLOOD_SPAN_S / steady
    timed = [
        replace(job, submit_time_s=0 if k < flood else round((k - flood + 0.5) * gap_s))
        for k, job in enumerate(sample.jobs)
    ]
    jobs = named_in_submission_order(timed)
    jobs = tuple(replace(job, tenant=FLOOD_TENANTS[0] if k < flood else FLOOD_TENANTS[1]) for k, job in enumerate(jobs))
    tenants = Tenants(tuple(Tenant(name, guaranteed=halves) for name in FLOOD_TENANTS))
    about = (
        f"Tenants of the flood scenario (seed {seed}): a submits {flood} jobs at time 0, b {steady} over the first "
        f"{FLOOD_SPAN_S // 3600} hours; each is guaranteed half of every GPU type of {cluster.describe()}."
    )
    return TenantWorkload(Workload(f"flood-seed{seed}", jobs, sample.source), tenants, about)


def requests_up_to(max_gpus: int, configs: ConfigChoices | None = None) -> ConfigChoices:
    """`configs` (default: the tuned choices) without the requests above `max_gpus`; an application left with none
    is refused by name."""
    choices = configs or tuned_configurations

    def fitting(application: str) -> list[tuple[int, int]]:
        kept = [(gpus, batch) for gpus, batch in choices(application) if gpus <= max_gpus]
        if not kept:
            raise SpecError(f"no request of {application!r} fits in {max_gpus} GPUs of one type; use a larger cluster")
        return kept

    return fitting


def tenants_toml(tenants: Tenants, about: str = "") -> str:
    """The tenants file `pollux.tenants.read_tenants` reads: one [[tenant]] table each, `about` as a comment."""
    lines = [f"# {about}", ""] if about else []
    for tenant in tenants.tenants:
        guaranteed = ", ".join(f"{gpu_type} = {count}" for gpu_type, count in tenant.guaranteed.items())
        lines += [
            "[[tenant]]",
            f"name = {json.dumps(tenant.name)}",
            f"weight = {float(tenant.weight)!r}",
            f"guaranteed = {{ {guaranteed} }}",
        ]
        if tenant.max_gpus:
            lines.append(f"max = {{ {', '.join(f'{t} = {n}' for t, n in tenant.max_gpus.items())} }}")
        lines += [f"borrow = {str(tenant.borrow).lower()}", ""]
    return "\n".join(lines)


def write_tenants(tenant_workload: TenantWorkload, path: str | Path) -> Path:
    """Write the tenants file beside its workload; the folder is made if missing."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tenants_toml(tenant_workload.tenants, tenant_workload.about), encoding="utf-8")
    return path

"""Sia's GPT scenario (the Sia paper's §5.3, Figure 6): one hybrid-parallel GPT job on the heterogeneous cluster,
while other jobs congest it for a while (docs/design.md, "Hybrid-parallel jobs").

Sia shows its GPT job (`gpt_pmp`: pipeline replicas of 2 A100s or 8 RTX 2080Tis, data parallel across replicas)
scaled down when the cluster fills, about hour 1, and back up when it empties, about hour 4. The artifact holds no
workload for it, so `gpt_scenario` builds one: the GPT job at time 0, then a burst of background jobs (by default
Helios jobs, the Sia artifact's `saturn` workloads) arriving from `burst_at_s` over `burst_s`, in their own order
and relative spacing. `gpt_track` reads what the GPT job held round by round from a simulation's result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pollux.sim.workload import WorkloadJob

GPT_APPLICATION = "gpt_pmp"
GPT_NAME = "gpt"
GPT_REQUEST = (16, 384)  # GPUs and batch a user would ask for: 8 replicas of 2 A100s, its max batch (48 per replica)
BURST_AT_S = 3600.0  # the background arrives from hour 1 (Figure 6's congestion)
BURST_S = 900.0  # over a quarter of an hour


def gpt_scenario(
    background: Sequence[WorkloadJob], burst_at_s: float = BURST_AT_S, burst_s: float = BURST_S
) -> tuple[WorkloadJob, ...]:
    """The GPT job at 0, then `background` submitted between `burst_at_s` and `burst_at_s + burst_s`: its first job
    at `burst_at_s`, the others spaced as in their own workload, squeezed (or stretched) to the burst."""
    gpt = WorkloadJob(GPT_NAME, 0, GPT_APPLICATION, *GPT_REQUEST)
    if not background:
        return (gpt,)
    times = [job.submit_time_s for job in background]
    first, span = min(times), max(times) - min(times)
    scale = burst_s / span if span > 0 else 0.0
    burst = tuple(
        replace(job, submit_time_s=round(burst_at_s + (job.submit_time_s - first) * scale)) for job in background
    )
    return (gpt, *burst)


@dataclass(frozen=True)
class GptPoint:
    """What the GPT job held from `time_s` on: its GPUs and its replicas (GPUs over the k of a replica there)."""

    time_s: float
    gpus: int
    replicas: int

    @property
    def gpus_per_replica(self) -> int:
        return self.gpus // self.replicas if self.replicas else 0


def gpt_track(track: Sequence[tuple[float, int, int]], replica_batch: int) -> list[GptPoint]:
    """The GPT job's points from its (time, GPUs, total batch) track (`SimResult.job_timelines`): its batch is
    `replica_batch` per replica, so the batch gives the replicas, and GPUs over replicas the GPU type's k."""
    return [GptPoint(t, gpus, batch // replica_batch) for t, gpus, batch in track]

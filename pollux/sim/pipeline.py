"""Hybrid-parallel jobs: a replica is a pipeline of k GPUs, and the job is data parallel across replicas (the Sia
paper's §5.3; docs/design.md, "Hybrid-parallel jobs").

Sia profiled one such job, `gpt_pmp`: a 2.8B-parameter GPT split into one pipeline stage per GPU, k = 2 stages on
A100 (`dgx-ext`) and k = 8 on RTX 2080Ti (`rtx`), run with the GPipe schedule on 48 micro-batches of one example per
replica, its statistical efficiency borrowed from BERT (its validation runs are BERT's). Its profile files do not
hold step times as a data-parallel job's do: `step_time` is one stage's forward time per micro-batch, `sync_time`
the all-reduce between replicas at that placement. Sia's simulator turns them into a step time by a formula of its
own (`applications.py`, `PMPApplication`), which `PipelineJobModel` reproduces:

    T_step = 3·((k − 1) + n_micro)·t_stage(micro-batch) + t_sync(placement)

(the pipeline's fill, then n_micro micro-batches, forward and a backward twice as long; then the all-reduce).

A `PipelineJobModel` answers like every `JobModel`, in the units the simulator's data-parallel jobs use, with one
difference the simulator reads from `gpus_per_replica`: `local_bsz` is the batch of one *replica* (n_micro ×
micro-batch = 48), not of one GPU, and a placement's GPUs form `sum(placement) / k` replicas, k on each node's
share. A placement that splits a replica is refused (`ValueError`): the engine never lets one through.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pollux.data.locate import SIA_DATASET
from pollux.data.profiles import JobProfile, load_typed_profiles
from pollux.goodput import GradientStats
from pollux.sim.measured import MeasuredJobModel


@dataclass(frozen=True)
class PipelineSettings:
    """What Sia's simulator sets for a pipeline-parallel model beyond its profiles (`applications.py`)."""

    stages: dict[str, int]  # k, GPUs (pipeline stages) per replica, on each GPU type it was profiled on
    micro_batches: int  # per replica and step (GPipe's n_micro)
    micro_batch_size: int  # examples per micro-batch
    max_epochs: int
    progress_slowdown: float  # Sia's calibration (1.0 for gpt_pmp)
    restore_delay_s: float  # Sia's checkpoint-restore delay (its default, 30 s, for gpt_pmp)


# Sia's `applications.py`: `PMPApplication(..., max_epochs=2, num_stages=8)` on rtx, `num_stages=2` on dgx-ext, 48
# micro-batches of size 1; `simulator_config.py`: slowdown 1.0; `job.py`: the default restore delay of 30 s.
SIA_PIPELINES: dict[str, PipelineSettings] = {
    "gpt_pmp": PipelineSettings({"dgx-ext": 2, "rtx": 8}, 48, 1, 2, 1.0, 30.0),
}


class PipelineJobModel:
    """One pipeline-parallel model on one GPU type (module docstring). Statistics and epochs as any measured model
    (the validation runs, read by a `MeasuredJobModel` of the same profile); step times by Sia's formula."""

    def __init__(self, profile: JobProfile, gpus_per_replica: int, settings: PipelineSettings) -> None:
        if gpus_per_replica < 1:
            raise ValueError(f"{profile.model}: gpus_per_replica must be >= 1, got {gpus_per_replica}")
        self.name = profile.model
        self.gpus_per_replica = gpus_per_replica
        self.micro_batches = settings.micro_batches
        self.micro_batch_size = settings.micro_batch_size
        replica_batch = settings.micro_batches * settings.micro_batch_size
        self.min_local_bsz = self.max_local_bsz = replica_batch  # a replica's batch is its micro-batches
        self._stats = MeasuredJobModel.from_profile(profile, settings.max_epochs)
        self.init_batch_size = self._stats.init_batch_size
        self.max_batch_size = self._stats.max_batch_size
        self.max_epochs = self._stats.max_epochs
        rows = profile.placements
        micro = rows.local_bsz == settings.micro_batch_size
        if not micro.any():
            raise ValueError(f"{profile.model}: no profiled micro-batch of {settings.micro_batch_size} example(s)")
        self._stage_s = float(np.mean(rows.step_time[micro]))
        # all-reduce time by (nodes, GPUs): the placements rows, then the scalability rows, of that micro-batch
        sync: dict[tuple[int, int], float] = {}
        for nodes, gpus, sync_s in zip(
            rows.num_nodes[micro], rows.num_replicas[micro], rows.sync_time[micro], strict=True
        ):
            sync.setdefault((int(nodes), int(gpus)), float(sync_s))
        scal = profile.scalability
        for nodes, gpus, bsz, sync_s in zip(
            scal.num_nodes, scal.num_replicas, scal.local_bsz, scal.sync_time, strict=True
        ):
            if bsz == settings.micro_batch_size:
                sync.setdefault((int(nodes), int(gpus)), float(sync_s))
        self._sync = sync

    def step_time(self, placement: tuple[int, ...], local_bsz: int) -> tuple[float, float]:
        """(T_step, T_sync) of one step of `local_bsz` examples per replica (module docstring)."""
        nodes = [g for g in placement if g]
        if not nodes or any(g % self.gpus_per_replica for g in nodes):
            raise ValueError(
                f"{self.name}: placement {placement!r} splits a replica of {self.gpus_per_replica} GPUs across nodes"
            )
        micro = max(local_bsz // self.micro_batches, 1)
        stage_s = self._stage_s * micro / self.micro_batch_size  # the profile: stage time ∝ micro-batch
        sync_s = self._sync_time(len(nodes), sum(nodes))
        return 3 * (self.gpus_per_replica - 1 + self.micro_batches) * stage_s + sync_s, sync_s

    def _sync_time(self, num_nodes: int, num_gpus: int) -> float:
        """The profiled all-reduce at (nodes, GPUs); else, among the rows on as many nodes, linear in the GPUs
        (clamped to the ends); else linear in the nodes among the rows on one GPU count per node (whole nodes)."""
        exact = self._sync.get((num_nodes, num_gpus))
        if exact is not None:
            return exact
        same = sorted((g, s) for (n, g), s in self._sync.items() if n == num_nodes)
        if same:
            return float(np.interp(num_gpus, [g for g, _ in same], [s for _, s in same]))
        by_nodes = sorted({n: s for (n, g), s in self._sync.items() if n > 1}.items())
        if len(by_nodes) < 2:
            return max(self._sync.values())
        (n0, s0), (n1, s1) = by_nodes[-2], by_nodes[-1]
        return s1 + (num_nodes - n1) * (s1 - s0) / (n1 - n0)

    def grad_stats(self, batch_size: float, epoch: int) -> GradientStats:
        return self._stats.grad_stats(batch_size, epoch)

    def epoch_progress(self, epoch: int) -> float:
        return self._stats.epoch_progress(epoch)

    def __repr__(self) -> str:
        return (
            f"PipelineJobModel({self.name!r}, {self.gpus_per_replica} GPUs per replica, "
            f"{self.micro_batches}×{self.micro_batch_size} examples per replica, M0={self.init_batch_size}, "
            f"max_batch={self.max_batch_size}, max_epochs={self.max_epochs})"
        )


def load_pipeline_profiles(name: str, data_dir: Path | None = None) -> dict[str, PipelineJobModel]:
    """`name`'s pipeline models on the types of `SIA_PIPELINES[name]` (from the Sia artifact's profiles)."""
    settings = SIA_PIPELINES[name]
    profiles = load_typed_profiles(name, data_dir, SIA_DATASET)
    return {t: PipelineJobModel(profiles[t], k, settings) for t, k in settings.stages.items() if t in profiles}

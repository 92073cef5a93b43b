"""Elastic data order: every example once per epoch, whatever the batch size or replica count does (torch-free).

Why: Pollux changes a job's batch size between steps and its replica count between restarts (§3.3, §4). The order
of an epoch is one permutation seeded by (seed, epoch), the same on every replica and after every restart; the only
state is the *position*: how many examples of that permutation the job has consumed. A plan cuts the permutation
from the position on into micro-batches of the current global size; each micro-batch is split into contiguous,
near-equal slices, one per replica. Changing the batch size or replica count re-plans from the position, so nothing
is skipped or repeated.

The tail: a micro-batch that would leave fewer examples than replicas takes them too (every replica gets ≥ 1
example). Only if a restart lands with fewer examples left in the epoch than replicas (< K examples) are those
examples skipped, since a replica cannot train on an empty batch; the agent logs it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of the plan: permutation positions [start, stop) across all replicas; `micro_index` within
    its optimizer step (0…accum_steps); `ends_step` when the optimizer steps after it."""

    start: int
    stop: int
    micro_index: int
    ends_step: bool
    full: bool  # of the configured global size (not a tail), so its step may be measured

    @property
    def size(self) -> int:
        return self.stop - self.start


def epoch_order(num_examples: int, epoch: int, seed: int, shuffle: bool) -> np.ndarray:
    """The epoch's permutation of dataset indices; identical on every replica and across restarts."""
    if not shuffle:
        return np.arange(num_examples, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(num_examples).astype(np.int64)


def replica_slice(start: int, stop: int, num_replicas: int, rank: int) -> tuple[int, int]:
    """Contiguous positions of `rank` in the micro-batch [start, stop): near-equal sizes, differing by ≤ 1."""
    size = stop - start
    return start + size * rank // num_replicas, start + size * (rank + 1) // num_replicas


def plan_micro_batches(
    num_examples: int, position: int, num_replicas: int, micro_batch_size: int, accum_steps: int
) -> list[MicroBatch]:
    """The rest of the epoch from `position`, as micro-batches of `micro_batch_size` examples summed over replicas,
    grouped into optimizer steps of `accum_steps + 1` micro-batches (the last step of an epoch may have fewer)."""
    if micro_batch_size < num_replicas:
        raise ValueError(f"micro_batch_size {micro_batch_size} < num_replicas {num_replicas}: a replica gets nothing")
    plan: list[MicroBatch] = []
    start, micro_index = position, 0
    if num_examples - start < num_replicas:
        return plan  # fewer examples than replicas left: nothing trainable (see the module docstring)
    while start < num_examples:
        stop = min(start + micro_batch_size, num_examples)
        if 0 < num_examples - stop < num_replicas:
            stop = num_examples
        ends_step = micro_index == accum_steps or stop == num_examples
        plan.append(MicroBatch(start, stop, micro_index, ends_step, stop - start == micro_batch_size))
        start, micro_index = stop, 0 if ends_step else micro_index + 1
    return plan

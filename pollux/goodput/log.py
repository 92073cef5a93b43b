"""Every (nodes, replicas, local batch, accumulation) a job has run, with its measured step times.

Why: the throughput model (Pollux §3.2) is refitted on all configurations the job itself has run, across
restarts, so the agent keeps the log in its checkpoint; a simulated job records its profile's times in the same log.
Per configuration it keeps the most recent timings and hands the fit their medians: one slow step (garbage
collection, a checkpoint, a noisy neighbour) must not bend the model.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from pollux.goodput.fit import ThroughputSamples

Config = tuple[int, int, int, int]  # (num_nodes, num_replicas, local_bsz, accum_steps)


class ThroughputLog:
    """Recent compute and step times per configuration."""

    def __init__(self, window: int = 64) -> None:
        self.window = window
        self._times: dict[Config, deque[tuple[float, float]]] = {}
        self._counts: dict[Config, int] = {}

    def record(
        self, num_nodes: int, num_replicas: int, local_bsz: int, accum_steps: int, compute_s: float, step_s: float
    ) -> None:
        """One optimizer step: `compute_s` = forward + backward of one micro-batch, `step_s` = the whole step."""
        if not (compute_s > 0 and step_s > 0):
            return
        key = (num_nodes, num_replicas, local_bsz, accum_steps)
        self._times.setdefault(key, deque(maxlen=self.window)).append((compute_s, step_s))
        self._counts[key] = self._counts.get(key, 0) + 1

    def __len__(self) -> int:
        return len(self._times)

    def __contains__(self, config: Config) -> bool:
        return config in self._times

    @property
    def max_replicas(self) -> int:
        """The most replicas the job has run on (the scheduler lets it grow to twice that: docs/design.md,
        "Goodput model")."""
        return max((key[1] for key in self._times), default=0)

    @property
    def max_replica_batch(self) -> int:
        """The most examples one replica has trained on in a step (per-GPU batch × micro-batches); 0 before any."""
        return max((key[2] * (key[3] + 1) for key in self._times), default=0)

    def steps_recorded(self) -> int:
        return sum(self._counts.values())

    def samples(self) -> ThroughputSamples | None:
        """One row per configuration, in the order first run, with its median times; None before the first record."""
        if not self._times:
            return None
        keys = list(self._times)
        cols = np.array(keys, dtype=np.int64).reshape(-1, 4)
        medians = np.array([np.median(np.array(self._times[k]), axis=0) for k in keys]).reshape(-1, 2)
        return ThroughputSamples.from_arrays(
            num_nodes=cols[:, 0],
            num_replicas=cols[:, 1],
            local_bsz=cols[:, 2],
            accum_steps=cols[:, 3],
            compute_time=medians[:, 0],
            step_time=medians[:, 1],
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "rows": [
                {"config": list(key), "times": [list(t) for t in times], "count": self._counts[key]}
                for key, times in self._times.items()
            ],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.window = int(state["window"])
        self._times, self._counts = {}, {}
        for row in state["rows"]:
            nodes, replicas, local_bsz, accum = (int(v) for v in row["config"])
            key = (nodes, replicas, local_bsz, accum)
            self._times[key] = deque(((float(c), float(s)) for c, s in row["times"]), maxlen=self.window)
            self._counts[key] = int(row["count"])

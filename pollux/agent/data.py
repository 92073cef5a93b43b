"""`AdaptiveDataLoader`: a DataLoader whose batch size the agent may change between steps (Pollux §3.3, §4.1).

`batch_size` is M0, the total batch the job's learning rate was tuned for. Without `autoscale_batch_size` every
optimizer step trains M0 examples split over the replicas; with it, the agent picks the per-replica batch m and the
accumulation steps s that maximise goodput on the current allocation. Either way the order of an epoch is the
elastic sampler's (pollux.agent.sampler): a seeded permutation and a position, so a new batch size or a restart on a
different number of replicas neither skips nor repeats an example.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sized
from typing import Any

import torch.utils.data

from pollux.agent.context import AgentContext, current_agent
from pollux.agent.sampler import epoch_order, plan_micro_batches, replica_slice
from pollux.errors import AgentError
from pollux.goodput import BatchConfig, BatchLimits, initial_config

LOG = logging.getLogger("pollux.agent")

_OWNED_KWARGS = ("batch_size", "sampler", "batch_sampler", "drop_last")


class AdaptiveDataLoader:
    """Iterate a map-style dataset in elastic, adaptively sized micro-batches (this replica's share of each).

    Extra keyword arguments (`num_workers`, `collate_fn`, `pin_memory`, ...) go to `torch.utils.data.DataLoader`.
    """

    def __init__(
        self,
        dataset: torch.utils.data.Dataset[Any],
        batch_size: int,
        shuffle: bool = False,
        *,
        seed: int = 0,
        name: str = "loader",
        agent: AgentContext | None = None,
        **dataloader_kwargs: Any,
    ) -> None:
        if not isinstance(dataset, Sized):
            raise AgentError("AdaptiveDataLoader needs a map-style dataset with __len__ (the order is a permutation)")
        owned = [k for k in _OWNED_KWARGS if k in dataloader_kwargs]
        if owned:
            raise AgentError(f"AdaptiveDataLoader chooses {', '.join(owned)} itself; remove those arguments")
        self._agent = agent or current_agent()
        if batch_size < self._agent.world_size:
            raise AgentError(f"batch_size={batch_size} is smaller than the {self._agent.world_size} replicas")
        self.dataset = dataset
        self.batch_size = batch_size  # M0
        self.shuffle = shuffle
        self.seed = seed
        self.name = name
        self._dataloader_kwargs = dataloader_kwargs
        self.limits: BatchLimits | None = None  # None: fixed total batch M0
        self.config = BatchConfig(math.ceil(batch_size / self._agent.world_size), 0)
        self.adapt_interval_steps = 25
        self.refit_interval_s = 5.0
        self.epoch = -1
        self.position = 0  # examples of this epoch's permutation consumed (over all replicas)
        self._agent.attach_loader(self)
        restored = self._agent.restored_state(name)
        if restored is not None:
            self.load_state_dict(restored)

    def autoscale_batch_size(
        self,
        max_batch_size: int,
        local_bsz_bounds: tuple[int, int] | None = None,
        gradient_accumulation: bool = False,
        *,
        adapt_interval_steps: int = 25,
        refit_interval_s: float = 5.0,
    ) -> None:
        """Let the agent choose the batch size: total at most `max_batch_size`, per replica within
        `local_bsz_bounds` (memory), with gradient accumulation beyond the per-replica maximum if allowed.
        The choice is revisited every `adapt_interval_steps` optimizer steps, with the throughput model refitted
        at most every `refit_interval_s` seconds."""
        if adapt_interval_steps < 1 or refit_interval_s < 0:
            raise AgentError(
                f"need adapt_interval_steps >= 1 and refit_interval_s >= 0, got {adapt_interval_steps}, "
                f"{refit_interval_s}"
            )
        try:
            bounds = self._agent.type_bounds(local_bsz_bounds or (1, max_batch_size))
            self.limits = BatchLimits(self.batch_size, max_batch_size, bounds, gradient_accumulation)
        except ValueError as exc:
            raise AgentError(f"autoscale_batch_size: {exc}") from exc
        self.adapt_interval_steps = adapt_interval_steps
        self.refit_interval_s = refit_interval_s
        self.config = initial_config(self.limits, self._agent.world_size)

    @property
    def current_local_bsz(self) -> int:
        """Examples per micro-batch on one replica (the largest share when M0 does not divide evenly)."""
        return self.config.local_bsz

    @property
    def accum_steps(self) -> int:
        return self.config.accum_steps

    @property
    def current_batch_size(self) -> int:
        """Examples per optimizer step, over all replicas and accumulation steps."""
        if self.limits is None:
            return self.batch_size
        return self.config.total(self._agent.world_size)

    @property
    def _global_micro_batch(self) -> int:
        return self.batch_size if self.limits is None else self.config.local_bsz * self._agent.world_size

    def __len__(self) -> int:
        """Micro-batches of a whole epoch for this replica at the current batch size."""
        return math.ceil(len(self.dataset) / self._global_micro_batch)

    def __iter__(self) -> Iterator[Any]:
        agent = self._agent
        agent.restore_rng_once()
        if self.epoch != agent.epoch:
            self.epoch, self.position = agent.epoch, 0
        num_examples = len(self.dataset)
        replicas, rank = agent.world_size, agent.rank
        if 0 < num_examples - self.position < replicas:
            LOG.warning(
                "skipping the last %d examples of epoch %d: fewer than replicas",
                num_examples - self.position,
                self.epoch,
            )
            self.position = num_examples
        agent.decide_batch(self)
        order = epoch_order(num_examples, self.epoch, self.seed, self.shuffle)
        tracker = agent.tracker
        tracker.init_batch_size, tracker.num_examples = self.batch_size, num_examples
        try:
            while self.position < num_examples:
                plan = plan_micro_batches(
                    num_examples, self.position, replicas, self._global_micro_batch, self.accum_steps
                )
                slices = [replica_slice(mb.start, mb.stop, replicas, rank) for mb in plan]
                batches = torch.utils.data.DataLoader(
                    self.dataset, batch_sampler=[order[a:b].tolist() for a, b in slices], **self._dataloader_kwargs
                )
                tracker.multi_gradient = replicas > 1 or self.accum_steps > 0
                warm = True  # the first step after (re)planning pays one-off costs: not a throughput sample
                data = iter(batches)
                for micro in plan:
                    start = time.perf_counter()
                    batch = next(data)
                    tracker.begin_micro(micro, start)
                    yield batch
                    timing = tracker.end_micro(time.perf_counter(), agent.distributed)
                    if timing is None:
                        continue
                    self.position = micro.stop
                    replan = agent.after_step(self, timing, warm)
                    warm = False
                    if replan:
                        break
        finally:
            tracker.leave()

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

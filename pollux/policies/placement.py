"""Placement and batch helpers shared by the fixed-size baselines (FIFO, Tiresias, Optimus).

These mirror the decisions of the Pollux artifact's baselines, so that our simulator reproduces their published
completion times: GPUs are taken greedily from the node with the most free GPUs (ties: lowest node index, the order in
which the artifact's `Counter.most_common` breaks them), a job that keeps its GPU count keeps its nodes, and a fixed
total batch is split over K GPUs by one exact rule (`fixed_batch_config`) that the simulator imports too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pollux.cluster import Allocation, Cluster, free_gpus
from pollux.policies.base import BatchConfig, JobView


def fixed_batch_config(
    batch_size: int,
    num_replicas: int,
    init_batch_size: int,
    max_batch_size: int,
    local_bsz_bounds: tuple[int, int],
) -> tuple[int, int]:
    """(local_bsz m, accum_steps s) that run a fixed total batch M on K GPUs, as the artifact's "tuned" jobs do.

    local = ⌈M/K⌉; s = ⌈local / max_local_bsz⌉ − 1, at least 1 on one GPU when M > M0 (the artifact's rule);
    m = ⌈local / (s+1)⌉, then capped so that K·m·(s+1) ≤ max batch. Integer arithmetic, so exact. The minimum
    per-GPU batch is not enforced (nor is it by the artifact); callers keep K ≤ M // min_local_bsz.
    """
    if num_replicas < 1:
        raise ValueError(f"fixed_batch_config needs num_replicas >= 1, got {num_replicas}")
    if batch_size < 1:
        raise ValueError(f"fixed_batch_config needs batch_size >= 1, got {batch_size}")
    max_local_bsz = local_bsz_bounds[1]
    local = -(-batch_size // num_replicas)
    accum_steps = -(-local // max_local_bsz) - 1
    if num_replicas == 1 and batch_size > init_batch_size:
        accum_steps = max(1, accum_steps)
    local_bsz = -(-local // (accum_steps + 1))
    local_bsz = min(local_bsz, max_batch_size // (num_replicas * (accum_steps + 1)))
    return local_bsz, accum_steps


def fixed_batches(jobs: Iterable[JobView], allocations: Mapping[str, Allocation]) -> dict[str, BatchConfig]:
    """Per-GPU batch and accumulation of every placed job that has a fixed total batch (`fixed_batch_config`)."""
    batch = {}
    for job in jobs:
        gpus = sum(allocations.get(job.name, ()))
        if job.batch_size is not None and gpus > 0:
            local_bsz, accum_steps = fixed_batch_config(
                job.batch_size, gpus, job.init_batch_size, job.max_batch_size, job.local_bsz_bounds
            )
            batch[job.name] = BatchConfig(local_bsz, accum_steps)
    return batch


def packed_placement(num_gpus: int, gpus_per_node: int) -> tuple[int, ...]:
    """GPUs per node when `num_gpus` fill whole nodes first: (4, 4, 2) for 10 GPUs on 4-GPU nodes.

    Optimus predicts step time on this placement (the artifact's `predict_step_time`)."""
    full, rest = divmod(num_gpus, gpus_per_node)
    return (gpus_per_node,) * full + ((rest,) if rest else ())


def place_most_free(free: Sequence[int], num_gpus: int) -> Allocation | None:
    """Take `num_gpus` GPUs node by node, each time from the node with the most free GPUs (ties: lowest index).

    The artifact's greedy placement for its baselines. It spreads a job over as few nodes as the free GPUs allow,
    but never waits for a better spot. None when fewer than `num_gpus` GPUs are free in total.
    """
    if num_gpus > sum(free):
        return None
    left = list(free)
    alloc = [0] * len(free)
    needed = num_gpus
    while needed > 0:
        node = max(range(len(left)), key=lambda n: (left[n], -n))
        take = min(left[node], needed)
        alloc[node] += take
        left[node] -= take
        needed -= take
    return tuple(alloc)


def place_consolidated(free: Sequence[int], num_gpus: int, gpus_per_node: int) -> Allocation | None:
    """Place on the fewest nodes the job could ever need, ⌈K / gpus_per_node⌉, or not at all (None: wait).

    Tiresias' consolidated placement (NSDI'19 §3.3) for placement-sensitive models. A job that fits one node goes to
    the node with the fewest free GPUs that still holds it (best fit, ties: lowest index), to keep large holes for
    large jobs; a larger job takes the nodes with the most free GPUs, which use the fewest nodes when any choice does.
    """
    if num_gpus <= gpus_per_node:
        fits = [n for n, f in enumerate(free) if f >= num_gpus]
        if not fits:
            return None
        node = min(fits, key=lambda n: (free[n], n))
        return tuple(num_gpus if n == node else 0 for n in range(len(free)))
    alloc = place_most_free(free, num_gpus)
    if alloc is None or sum(1 for g in alloc if g > 0) > -(-num_gpus // gpus_per_node):
        return None
    return alloc


def take(free: list[int], alloc: Allocation) -> None:
    """Subtract a placed job's GPUs from the free GPUs per node (in place, on the caller's own list)."""
    for node, gpus in enumerate(alloc):
        free[node] -= gpus


def kept_allocations(jobs: Iterable[JobView], cluster: Cluster, keep: Mapping[str, int]) -> dict[str, Allocation]:
    """Current allocations of the jobs in `keep` that already hold exactly `keep[name]` GPUs on this cluster.

    A job whose size does not change stays where it is, so it is not restarted (the artifact keeps a running
    job's allocation the same way)."""
    kept = {}
    for job in jobs:
        want = keep.get(job.name, 0)
        alloc = tuple(job.allocation)
        if want > 0 and len(alloc) == cluster.num_nodes and sum(alloc) == want and min(alloc) >= 0:
            kept[job.name] = alloc
    if any(f < 0 for f in free_gpus(cluster, kept)):
        return {}  # the views disagree with the cluster (over-committed nodes): place everything afresh
    return kept


def in_submit_order(jobs: Sequence[JobView]) -> list[JobView]:
    """Jobs by submit time; ties keep the order they are given in (the engine lists jobs in workload order, which
    is how the artifact iterates them, so FIFO ties resolve as there)."""
    return sorted(jobs, key=lambda job: job.submit_time_s)

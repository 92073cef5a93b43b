"""Placement and batch helpers shared by the fixed-size baselines (FIFO, Tiresias, Optimus).

These mirror the decisions of the Pollux artifact's baselines, so that our simulator reproduces their published
completion times: GPUs are taken greedily from the node with the most free GPUs (ties: lowest node index, the order in
which the artifact's `Counter.most_common` breaks them), a job that keeps its GPU count keeps its nodes, and a fixed
total batch is split over K GPUs by one exact rule (`fixed_batch_config`) that the simulator imports too. Nodes may
differ in size; on a cluster of several GPU types a job is placed on the nodes of one type (`place_on_one_type`),
the rule otherwise unchanged, so on a cluster of one type the baselines decide exactly as the artifact's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pollux.cluster import Allocation, Cluster, free_gpus
from pollux.policies.base import BatchConfig, JobView

# Node sizes a placement rule may be given: every node's, or one size for all nodes.
NodeSizes = int | Sequence[int]


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


def fixed_batches(
    jobs: Iterable[JobView], allocations: Mapping[str, Allocation], cluster: Cluster
) -> dict[str, BatchConfig]:
    """Per-GPU batch and accumulation of every placed job that has a fixed total batch (`fixed_batch_config`),
    within the memory of the GPU type it is placed on."""
    batch = {}
    for job in jobs:
        alloc = allocations.get(job.name, ())
        gpus = sum(alloc)
        if job.batch_size is not None and gpus > 0:
            gpu_type = cluster.allocation_type(alloc) if cluster.heterogeneous else None
            bounds = job.bounds_on(gpu_type) if gpu_type is not None else job.local_bsz_bounds
            local_bsz, accum_steps = fixed_batch_config(
                job.batch_size, gpus, job.init_batch_size, job.max_batch_size, bounds
            )
            batch[job.name] = BatchConfig(local_bsz, accum_steps)
    return batch


def packed_placement(num_gpus: int, node_gpus: NodeSizes) -> tuple[int, ...]:
    """GPUs per node when `num_gpus` fill whole nodes first, the largest first: (4, 4, 2) for 10 GPUs on 4-GPU
    nodes, (8, 2) on nodes of 8 and 4 GPUs.

    Optimus predicts step time on this placement (the artifact's `predict_step_time`). `node_gpus`: every node's
    size, or one size for as many nodes as it takes."""
    if isinstance(node_gpus, int):
        full, rest = divmod(num_gpus, node_gpus)
        return (node_gpus,) * full + ((rest,) if rest else ())
    if num_gpus > sum(node_gpus):
        raise ValueError(f"packed_placement: {num_gpus} GPUs do not fit nodes of {list(node_gpus)} GPUs")
    packed = []
    for size in sorted(node_gpus, reverse=True):
        if num_gpus <= 0:
            break
        packed.append(min(size, num_gpus))
        num_gpus -= packed[-1]
    return tuple(packed)


def fewest_nodes(num_gpus: int, node_gpus: Sequence[int]) -> int:
    """The fewest of these nodes that hold `num_gpus` GPUs: the largest ones (⌈K / G⌉ on nodes of G GPUs);
    one more than there are nodes when all of them together cannot."""
    held = 0
    for used, size in enumerate(sorted(node_gpus, reverse=True), start=1):
        held += size
        if held >= num_gpus:
            return used
    return len(node_gpus) + 1


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


def place_consolidated(free: Sequence[int], num_gpus: int, node_gpus: NodeSizes) -> Allocation | None:
    """Place on the fewest nodes the job could ever need (`fewest_nodes`), or not at all (None: wait).

    Tiresias' consolidated placement (NSDI'19 §3.3) for placement-sensitive models. A job that fits one node goes to
    the node with the fewest free GPUs that still holds it (best fit, ties: lowest index), to keep large holes for
    large jobs; a larger job takes the nodes with the most free GPUs, which use the fewest nodes when any choice does.
    `node_gpus`: every node's size, or one size for all.
    """
    sizes = [node_gpus] * len(free) if isinstance(node_gpus, int) else list(node_gpus)
    if num_gpus <= max(sizes, default=0):
        fits = [n for n, f in enumerate(free) if f >= num_gpus]
        if not fits:
            return None
        node = min(fits, key=lambda n: (free[n], n))
        return tuple(num_gpus if n == node else 0 for n in range(len(free)))
    alloc = place_most_free(free, num_gpus)
    if alloc is None or sum(1 for g in alloc if g > 0) > fewest_nodes(num_gpus, sizes):
        return None
    return alloc


def of_type(cluster: Cluster, per_node: Sequence[int], gpu_type: str) -> list[int]:
    """`per_node` (free GPUs, node sizes) with every node of another GPU type set to 0: what a placement rule sees
    when it may only use `gpu_type`."""
    return [v if t == gpu_type else 0 for v, t in zip(per_node, cluster.node_types, strict=True)]


def allowed_types(cluster: Cluster, job: JobView) -> list[str]:
    """The cluster's GPU types `job` may run on, in the cluster's order."""
    return [t for t in cluster.gpu_types if job.may_run_on(t)]


def largest_type_gpus(cluster: Cluster, job: JobView) -> int:
    """The most GPUs `job` could ever hold: all of its largest allowed type (0 when it may use none here)."""
    return max((cluster.gpus_of_type(t) for t in allowed_types(cluster, job)), default=0)


def never_fits(cluster: Cluster, capacity: int) -> str:
    """Why a job needing more than `capacity` GPUs (its `largest_type_gpus`) never runs here: a waiting reason."""
    if capacity == cluster.num_gpus:
        return f"the cluster has {cluster.num_gpus}"
    if capacity == 0:
        return f"it may run on none of the cluster's GPU types ({', '.join(cluster.gpu_types)})"
    return f"the largest GPU type it may run on has {capacity} (a job never spans two types)"


def place_on_one_type(
    cluster: Cluster, free: Sequence[int], job: JobView, num_gpus: int, consolidated: bool = False
) -> Allocation | None:
    """Where a rigid job goes: the rule of the type-unaware baselines (`place_most_free`, or `place_consolidated`),
    on the nodes of one GPU type it may use, since a job never spans two types.

    On a cluster of one type this is the rule itself. With several, each allowed type is tried and the type whose
    nodes the rule would take first wins: for a spread job the type holding the node with most free GPUs (ties:
    lowest node index), for a consolidated job the fewest nodes, then on one node the best fit. None: it fits no
    type now."""
    types = allowed_types(cluster, job)
    if len(cluster.gpu_types) == 1:
        if not types:
            return None
        return (
            place_consolidated(free, num_gpus, cluster.node_gpus) if consolidated else place_most_free(free, num_gpus)
        )
    best: tuple[tuple[int, int, int], Allocation] | None = None
    for gpu_type in types:
        masked = of_type(cluster, free, gpu_type)
        if consolidated:
            alloc = place_consolidated(masked, num_gpus, of_type(cluster, cluster.node_gpus, gpu_type))
        else:
            alloc = place_most_free(masked, num_gpus)
        if alloc is None:
            continue
        used = [n for n, g in enumerate(alloc) if g > 0]
        if consolidated and len(used) == 1:
            rank = (1, free[used[0]], used[0])  # best fit: the fullest node that holds it
        else:
            first = min(used, key=lambda n: (-free[n], n))  # the freest node, which the rule takes first
            rank = (len(used) if consolidated else 0, -free[first], first)
        if best is None or rank < best[0]:
            best = (rank, alloc)
    return None if best is None else best[1]


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
        if want <= 0 or len(alloc) != cluster.num_nodes or sum(alloc) != want or min(alloc) < 0:
            continue
        if job.gpu_types is None or job.may_run_on(str(cluster.allocation_type(alloc))):
            kept[job.name] = alloc
    if any(f < 0 for f in free_gpus(cluster, kept)):
        return {}  # the views disagree with the cluster (over-committed nodes): place everything afresh
    return kept


def in_submit_order(jobs: Sequence[JobView]) -> list[JobView]:
    """Jobs by submit time; ties keep the order they are given in (the engine lists jobs in workload order, which
    is how the artifact iterates them, so FIFO ties resolve as there)."""
    return sorted(jobs, key=lambda job: job.submit_time_s)

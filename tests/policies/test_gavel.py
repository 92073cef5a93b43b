"""Gavel with rigid jobs on clusters of several GPU types: its linear program, its rounds, its placement.

Step times come from a small fake of the simulator's input (`step_time`, with the GPU type as a keyword): the real
job models are wired in by the simulator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
from policy_jobs import PARAMS, view

from pollux.cluster import Cluster, NodeGroup, validate_allocations
from pollux.goodput import BatchConfig
from pollux.policies.base import JobView, PolicyResult
from pollux.policies.gavel import GavelPolicy, max_sum_throughput
from pollux.policies.registry import make_policy
from pollux.policies.tuned_jobs import type_fit

ROUND_S = 360.0
SPEED = {"aws": 1.0, "quad": 1.5, "rtx": 2.0, "dgx-ext": 5.0}  # relative compute speed of each type
APP_SPEED = {"cifar10": 3.0, "bert": 0.5, "imagenet": 1.0}


def fake_step_time(
    job: JobView, placement: tuple[int, ...], local_bsz: int, accum_steps: int, gpu_type: str | None = None
) -> float:
    """Compute ∝ examples per GPU ÷ the type's speed, plus a synchronisation that grows with the nodes spanned."""
    speed = SPEED[gpu_type or "aws"] * APP_SPEED[job.application]
    return (accum_steps + 1) * local_bsz * 1e-3 / speed + 0.02 * len(placement)


def table_step_time(seconds: Mapping[tuple[str, str], float]):
    """A step time looked up by (job name, GPU type)."""

    def step_time(job, placement, local_bsz, accum_steps, gpu_type=None) -> float:
        return seconds[job.name, gpu_type]

    return step_time


def rigid(
    name: str,
    cluster: Cluster,
    gpus: int,
    batch: int = 512,
    **fields,
) -> JobView:
    """A job of the workload's fixed GPUs and batch (TunedJobs), waiting, with any other view fields given."""
    return replace(view(name, gpus=gpus, batch_size=batch, num_nodes=cluster.num_nodes), **fields)


def run_rounds(policy: GavelPolicy, cluster: Cluster, jobs: Sequence[JobView], rounds: int) -> list[PolicyResult]:
    """Gavel's rounds, each job's allocation and time on each type fed back (jobs never finish)."""
    state = {job.name: job for job in jobs}
    results = []
    for r in range(rounds):
        result = policy.optimize(list(state.values()), cluster, r * ROUND_S)
        results.append(result)
        for name, job in state.items():
            alloc = result.allocations.get(name, cluster.empty())
            held = cluster.allocation_type(alloc)
            run = dict(job.run_time_by_type_s)
            if held is not None:
                run[held] = run.get(held, 0.0) + ROUND_S
            state[name] = replace(job, allocation=alloc, run_time_by_type_s=run)
    return results


def random_cluster(rng: np.random.Generator) -> Cluster:
    kinds = [("aws", 4), ("rtx", 8), ("dgx-ext", 8), ("quad", 4)]
    chosen = rng.choice(len(kinds), size=int(rng.integers(1, 4)), replace=False)
    return Cluster.of_groups([NodeGroup(kinds[k][0], int(rng.integers(1, 4)), kinds[k][1]) for k in sorted(chosen)])


def random_rigid_jobs(rng: np.random.Generator, cluster: Cluster, count: int) -> list[JobView]:
    """Jobs of random sizes and batches; per-type memory limits, some restricted to a few types."""
    jobs = []
    for i in range(count):
        types = cluster.gpu_types
        allowed = None if rng.random() < 0.6 else tuple(t for t in types if rng.random() < 0.6)
        jobs.append(
            rigid(
                f"job-{i:02d}",
                cluster,
                gpus=int(rng.choice([1, 2, 4, 8, 16])),
                batch=int(rng.choice([64, 256, 1024, 4096])),
                application=str(rng.choice(["cifar10", "bert", "imagenet"])),
                gpu_types=allowed,
                local_bsz_bounds_by_type={t: (16, int(rng.choice([64, 128, 512]))) for t in types},
                submit_time_s=float(rng.integers(0, 3)) * ROUND_S,
            )
        )
    return jobs


# -- the linear program -------------------------------------------------------------------------------------------
def test_identical_jobs_share_the_time_alike_as_an_interior_point_solver_shares_it() -> None:
    """Three identical jobs want one type's 4 GPUs: a simplex vertex gives one all of the time, the artifact's
    interior-point solver (ECOS) a third to each; the job that gains most on the other type takes it."""
    throughput = np.array([[2.0, 1.0], [2.0, 1.0], [2.0, 1.0], [1.0, 3.0]])
    fractions = max_sum_throughput(throughput, np.array([4, 4, 4, 4]), np.array([4, 4]))
    np.testing.assert_array_equal(fractions, [[0.33333, 0], [0.33333, 0], [0.33333, 0], [0, 1]])


def test_time_fractions_keep_each_types_capacity_one_type_at_a_time_and_zero_where_a_job_cannot_run() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        jobs, types = int(rng.integers(1, 40)), int(rng.integers(1, 4))
        throughput = rng.uniform(1, 1000, (jobs, types)) * (rng.random((jobs, types)) > 0.2)
        gpus = rng.choice([1, 2, 4, 8, 16], jobs)
        capacity = rng.choice([4, 8, 16, 24], types)
        fractions = max_sum_throughput(throughput, gpus, capacity)
        assert np.all(fractions >= 0) and np.all(fractions.sum(axis=1) <= 1 + 1e-6)
        assert np.all(gpus @ fractions <= capacity + 1e-5)
        assert np.all(fractions[throughput == 0] == 0)


def test_with_room_for_everyone_every_job_gets_its_whole_time_on_its_fastest_type() -> None:
    throughput = np.array([[1.0, 3.0], [2.0, 1.0], [0.0, 5.0]])
    fractions = max_sum_throughput(throughput, np.array([1, 1, 1]), np.array([8, 8]))
    np.testing.assert_allclose(fractions, [[0, 1], [1, 0], [0, 1]])


def test_the_faster_type_goes_to_the_job_that_gains_most_from_it_not_to_the_fastest_job() -> None:
    """b is the faster job on A100s (2560 vs 2048 examples/s), but a gains 1792 examples/s there and b only 1024:
    a on A100 + b on T4 = 3584 examples/s, the other way round 2816. Gavel maximizes the sum."""
    cluster = Cluster.of_groups([NodeGroup("aws", 1, 4), NodeGroup("dgx-ext", 1, 4)])
    seconds = {("a", "aws"): 2.0, ("a", "dgx-ext"): 0.25, ("b", "aws"): 1 / 3, ("b", "dgx-ext"): 0.2}
    jobs = [rigid(name, cluster, gpus=4, batch=512) for name in ("a", "b")]
    result = GavelPolicy(table_step_time(seconds)).optimize(jobs, cluster, now=0.0)
    assert result.info["time_fractions"] == {"a": {"aws": 0.0, "dgx-ext": 1.0}, "b": {"aws": 1.0, "dgx-ext": 0.0}}
    assert result.allocations == {"a": (0, 4), "b": (4, 0)}


# -- where jobs may run -------------------------------------------------------------------------------------------
def test_a_job_past_a_types_memory_is_rated_there_with_gradient_accumulation_as_it_would_run() -> None:
    """256 examples per GPU fit an RTX (512) but not a T4 (128): on the T4 it runs 128 per GPU twice a step, and
    Gavel rates it at that slower step."""
    cluster = Cluster.of_groups([NodeGroup("aws", 1, 4), NodeGroup("rtx", 1, 4)])
    bounds = {"aws": (16, 128), "rtx": (16, 512)}
    big = rigid("big", cluster, gpus=4, batch=1024, local_bsz_bounds_by_type=bounds)
    on_t4, on_rtx = type_fit(big, cluster, "aws"), type_fit(big, cluster, "rtx")
    assert on_t4.batch == BatchConfig(128, 1) and on_rtx.batch == BatchConfig(256, 0)
    result = GavelPolicy(fake_step_time).optimize([replace(big, gpu_types=("aws",))], cluster, now=0.0)
    assert result.allocations == {"big": (4, 0)} and result.batch["big"] == BatchConfig(128, 1)


def test_random_rounds_keep_capacity_one_type_per_job_the_requested_gpus_and_the_jobs_memory() -> None:
    rng = np.random.default_rng(7)
    for _ in range(15):
        cluster = random_cluster(rng)
        jobs = random_rigid_jobs(rng, cluster, int(rng.integers(1, 25)))
        by_name = {job.name: job for job in jobs}
        for result in run_rounds(GavelPolicy(fake_step_time), cluster, jobs, rounds=6):
            validate_allocations(cluster, result.allocations)  # node capacity, and one type per job
            assert set(result.reasons) == set(by_name) - set(result.allocations)
            for name, alloc in result.allocations.items():
                job, held = by_name[name], cluster.allocation_type(alloc)
                assert held is not None and sum(alloc) == job.requested_gpus
                assert job.may_run_on(held) and type_fit(job, cluster, held).fits
                config = result.batch[name]
                assert config.local_bsz <= job.bounds_on(held)[1]


# -- rounds -------------------------------------------------------------------------------------------------------
def test_priorities_rotate_two_jobs_that_cannot_run_together_in_proportion_to_their_fractions() -> None:
    """Two 3-GPU jobs on 4 GPUs: the LP gives the faster one the whole time (X = 1) and the other the third it can
    fit beside it (X = 1/3). They cannot run together, so rounds alternate by priority: a runs 3 rounds in 4."""
    cluster = Cluster(1, 4)
    seconds = {("a", "aws"): 0.9, ("b", "aws"): 1.0}
    jobs = [rigid(name, cluster, gpus=3) for name in ("a", "b")]
    results = run_rounds(GavelPolicy(table_step_time(seconds)), cluster, jobs, rounds=16)
    assert results[0].info["time_fractions"] == {"a": {"aws": 1.0}, "b": {"aws": 0.33333}}
    running = ["".join(sorted(r.allocations)) for r in results]
    # round 2: a has 1.5 rounds of the 2 counted (half a round each from the start), b 0.5: priorities
    # 1 ÷ (1.5 / 2) = 4/3 and (1/3) ÷ (0.5 / 2) = 4/3 tie, and the larger X (a's) goes first
    assert running[:3] == ["a", "a", "b"]
    assert running.count("a") == 12 and running.count("b") == 4
    assert results[1].reasons["b"] == "waiting: lower priority than the jobs placed on aws (0.33)"


def test_the_fraction_received_counts_every_jobs_time_on_the_type_finished_jobs_included() -> None:
    """The artifact's bookkeeping: priority = X ÷ (time on the type ÷ all jobs' time on it), each job counted half
    a round from its first round. a ran one round alone and left: the type's time is a's 180 + 360 s and the
    180 s of each newcomer, so b's priority is X · 900 / 180."""
    cluster = Cluster(1, 4)
    policy = GavelPolicy(fake_step_time)
    first = policy.optimize([rigid("a", cluster, gpus=4)], cluster, now=0.0)
    assert first.allocations == {"a": (4,)} and first.info["priorities"]["a"]["aws"] == 1.0  # alone: all of it
    newcomers = [rigid(name, cluster, gpus=4, submit_time_s=ROUND_S) for name in ("b", "c")]
    result = policy.optimize(newcomers, cluster, now=ROUND_S)
    share = result.info["time_fractions"]["b"]["aws"]
    assert share == 0.5 and result.info["priorities"]["b"]["aws"] == share * 900 / 180


def test_a_job_left_out_of_a_round_and_back_is_counted_once() -> None:
    """Behind the quota layer a job may be missing from a round's views and come back: its time then counts as
    its view says, not once more as a job that left."""
    cluster = Cluster(1, 4)
    policy = GavelPolicy(fake_step_time)
    a, b = (rigid(name, cluster, gpus=4) for name in ("a", "b"))
    policy.optimize([a, b], cluster, now=0.0)
    policy.optimize([b], cluster, now=ROUND_S)
    a = replace(a, run_time_by_type_s={"aws": ROUND_S})
    b = replace(b, run_time_by_type_s={"aws": ROUND_S})
    result = policy.optimize([a, b], cluster, now=2 * ROUND_S)
    assert result.info["priorities"]["a"]["aws"] == result.info["time_fractions"]["a"]["aws"] * 2


def test_a_job_that_stays_on_its_type_keeps_its_exact_gpus() -> None:
    """Spread over two RTX nodes, a job Gavel keeps on RTX is not repacked onto one node (that would restart it);
    a new job takes the first free GPUs in node order."""
    cluster = Cluster.of_groups([NodeGroup("aws", 1, 4), NodeGroup("rtx", 2, 8)])
    running = rigid("running", cluster, gpus=4, allocation=(0, 2, 2), run_time_by_type_s={"rtx": 720.0})
    fresh = rigid("fresh", cluster, gpus=4)
    result = GavelPolicy(fake_step_time).optimize([running, fresh], cluster, now=720.0)
    assert result.allocations == {"running": (0, 2, 2), "fresh": (0, 4, 0)}


def test_new_jobs_take_the_first_free_gpus_in_node_order_largest_first_across_nodes_if_need_be() -> None:
    """The artifact's placement: per type, the largest jobs first; a job that held GPUs of the type keeps them
    where all are still free, the others take the first free GPUs node by node. The 8-GPU newcomer takes node 0,
    where the 2-GPU job ran, which moves to the next free GPUs; the 6-GPU one then straddles nodes 1 and 2."""
    cluster = Cluster(3, 8)
    small = rigid("small", cluster, gpus=2, allocation=(2, 0, 0), run_time_by_type_s={"aws": 360.0})
    big = rigid("big", cluster, gpus=8)
    mid = rigid("mid", cluster, gpus=6)
    result = GavelPolicy(fake_step_time).optimize([small, big, mid], cluster, now=720.0)
    assert result.allocations == {"big": (8, 0, 0), "mid": (0, 6, 0), "small": (0, 2, 0)}
    held = rigid("held", cluster, gpus=6, allocation=(0, 2, 4), run_time_by_type_s={"aws": 360.0})
    result = GavelPolicy(fake_step_time).optimize([held, big, mid], cluster, now=720.0)
    assert result.allocations == {"big": (8, 0, 0), "held": (0, 2, 4), "mid": (0, 6, 0)}


def test_the_same_jobs_in_any_order_give_the_same_decisions() -> None:
    rng = np.random.default_rng(3)
    for _ in range(10):
        cluster = random_cluster(rng)
        jobs = random_rigid_jobs(rng, cluster, int(rng.integers(2, 20)))
        shuffled = [jobs[i] for i in rng.permutation(len(jobs))]
        first, second = (GavelPolicy(fake_step_time).optimize(js, cluster, now=720.0) for js in (jobs, shuffled))
        assert (first.allocations, first.reasons, first.batch) == (second.allocations, second.reasons, second.batch)
        assert first.info == second.info


# -- building it --------------------------------------------------------------------------------------------------
def test_the_factory_builds_a_rigid_gavel_with_its_own_round_on_the_simulators_step_times() -> None:
    policy = make_policy("gavel", inputs={"step_time": lambda: fake_step_time})
    assert isinstance(policy, GavelPolicy) and not policy.uses_throughput_model
    assert (policy.round_s, policy.elastic_gpus, policy.batch_owner) == (360, False, "user")
    assert not policy.avoids_sharing


def test_without_true_step_times_a_job_with_no_fitted_model_only_fills_idle_gpus() -> None:
    """The runtime's Gavel reads fitted models: a measured job gets a time fraction; one measured nowhere gets none,
    but still runs where GPUs would otherwise idle, and is measured there."""
    cluster = Cluster.of_groups([NodeGroup("aws", 1, 4), NodeGroup("rtx", 1, 4)])
    measured = rigid("measured", cluster, gpus=4, throughput_params_by_type={"rtx": PARAMS})
    new = rigid("new", cluster, gpus=4)
    policy = GavelPolicy()
    result = policy.optimize([measured, new], cluster, now=0.0)
    assert policy.uses_throughput_model
    assert result.info["time_fractions"]["new"] == {"aws": 0.0, "rtx": 0.0}
    assert result.info["time_fractions"]["measured"]["rtx"] == 1.0
    assert result.allocations == {"measured": (0, 4), "new": (4, 0)}

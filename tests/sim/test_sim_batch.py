"""A simulated Pollux job chooses its batch exactly as a real job's agent does: one decision, `decide_batch`."""

from dataclasses import dataclass

import numpy as np

from pollux.goodput import BatchLimits, GradientStats, ThroughputParams, decide_batch
from pollux.sim.backend import SimJob, SimJobSpec
from pollux.sim.typed import TypedJobModel


def one_type(model) -> TypedJobModel:
    return TypedJobModel("toy", {"aws": model})


@dataclass
class Bounds:
    """The job model's batch bounds; the rest of a `JobModel` plays no part in the batch choice."""

    init_batch_size: int
    max_batch_size: int
    min_local_bsz: int
    max_local_bsz: int
    name: str = "toy"
    max_epochs: int = 1


def random_case(rng: np.random.Generator):
    m0 = int(rng.integers(1, 1025))
    lo = int(rng.integers(1, 65))
    hi = lo + int(rng.integers(0, 512))
    largest = m0 * int(rng.choice([1, 2, 8, 64, 512]))
    replicas = int(rng.integers(1, 65))  # sometimes more than largest // lo: nothing fits, the fallback decides
    nodes = int(rng.integers(1, min(replicas, 16) + 1))
    per_node = np.ones(nodes, dtype=int) + np.bincount(rng.integers(0, nodes, replicas - nodes), minlength=nodes)
    params = ThroughputParams(*np.exp(rng.uniform(np.log(1e-5), np.log(1.0), 6)), rng.uniform(1.0, 10.0))
    stats = GradientStats(sqr=float(rng.uniform(0, 10)), var=float(np.exp(rng.uniform(-5, 8))))
    if rng.random() < 0.1:  # before the first fit, or the first gradient measurement
        params, stats = (None, stats) if rng.random() < 0.5 else (params, None)
    return Bounds(m0, largest, lo, hi), tuple(int(g) for g in per_node), params, stats


def test_on_random_cases_the_simulated_job_and_the_agent_choose_the_same_batch():
    rng = np.random.default_rng(16)
    fallbacks = 0
    for _ in range(1000):
        model, allocation, params, stats = random_case(rng)
        job = SimJob(SimJobSpec("j", "toy", 0.0, 1, None), one_type(model), grad_stats=stats)
        if params is not None:
            job.params_by_type[job.gpu_type] = params
        job.allocation = allocation
        job.choose_batch()
        limits = BatchLimits(model.init_batch_size, model.max_batch_size, (model.min_local_bsz, model.max_local_bsz))
        agent = decide_batch(limits, params, stats, len(allocation), sum(allocation))  # as rank 0 of the job
        assert (job.local_bsz, job.accum_steps) == (agent.config.local_bsz, agent.config.accum_steps), (
            model,
            allocation,
            params,
            stats,
        )
        fallbacks += params is not None and stats is not None and agent.goodput == 0
    assert fallbacks > 10  # the fallback where nothing fits is exercised


def test_the_issues_example_splits_m0_the_same_way_in_both():
    model = Bounds(init_batch_size=128, max_batch_size=4096, min_local_bsz=4, max_local_bsz=32)
    job = SimJob(SimJobSpec("j", "toy", 0.0, 3, None), one_type(model))
    job.reallocate((3,), 0.0, 30.0)
    assert (job.local_bsz, job.accum_steps) == (22, 1)
    assert decide_batch(BatchLimits(128, 4096, (4, 32)), None, None, 1, 3).config.local_bsz == 22

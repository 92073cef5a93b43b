"""How far a job may grow past the GPUs it has run on: the views' exploration bound (twice), and the Pollux policy's
own factor where it weighs remaining work (`PolluxPolicy.explore`, docs/design.md, "Remaining work")."""

from __future__ import annotations

import pytest
from pollux_jobs import NOW

from pollux.cluster import Cluster, NodeGroup
from pollux.errors import SpecError
from pollux.goodput import GradientStats, ThroughputParams
from pollux.policies.base import JobView
from pollux.policies.facts import JobFacts, job_view
from pollux.policies.pollux import PolluxPolicy

# Scales almost linearly; with a large noise scale its goodput grows with every GPU it is given.
PARAMS = ThroughputParams(
    alpha_c=0.05, beta_c=0.01, alpha_r=0.001, beta_r=0.0001, alpha_n=0.001, beta_n=0.0001, gamma=1.5
)
STATS = GradientStats(sqr=1.0, var=1e4)
TYPED = Cluster.of_groups([NodeGroup("a100", 2, 8), NodeGroup("t4", 1, 8)])
ONE_TYPE = Cluster(num_nodes=3, gpus_per_node=8)


def facts_view(cluster: Cluster, ran_on: int, **fields) -> JobView:
    """An adaptive job that has run on `ran_on` GPUs (of `cluster`'s first type), as a backend shows it."""
    typed = cluster.heterogeneous
    facts = JobFacts(
        name="a",
        application="cifar10",
        submit_time_s=0.0,
        allocation=cluster.empty(),
        num_restarts=1,
        attained_service_gpu_s=1000.0,
        requested_gpus=1,
        init_batch_size=128,
        max_batch_size=4096,
        local_bsz_bounds=(32, 512),
        max_replicas_run=ran_on,
        throughput_params=PARAMS,
        grad_stats=STATS,
        gpu_types=cluster.gpu_types if typed else None,
        throughput_params_by_type={cluster.gpu_types[0]: PARAMS} if typed else {},
        run_time_by_type_s={cluster.gpu_types[0]: 600.0} if typed else {},
        single_gpu_throughput_by_type={"a100": 3.0, "t4": 1.0} if typed else {},
        **fields,
    )
    return job_view(facts)


def test_a_view_shows_what_the_job_explored_and_its_bound_without_exploration():
    view = facts_view(ONE_TYPE, ran_on=2)
    assert (view.max_gpus, view.explored_gpus, view.max_gpus_unexplored) == (4, 2, 64)  # 64: MAX_ELASTIC_GPUS
    assert view.max_gpus_exploring(2) == view.max_gpus
    assert view.max_gpus_exploring(4) == 8
    assert facts_view(ONE_TYPE, ran_on=2, gpu_cap=6).max_gpus_exploring(4) == 6  # the user's cap still binds
    assert facts_view(ONE_TYPE, ran_on=0).max_gpus_exploring(4) == 1  # nothing run: one GPU to start


def test_a_fixed_batch_has_no_exploration_term_to_widen():
    view = facts_view(ONE_TYPE, ran_on=2, batch_size=512)
    assert view.max_gpus_unexplored is None
    assert view.max_gpus_exploring(4) == view.max_gpus == 512 // 32


def test_weighing_remaining_work_a_job_may_grow_to_explore_times_what_it_ran_on():
    """On a cluster of several types (remaining work weighed by default) a job that ran on 2 GPUs alone gets 8, four
    times; with `explore` at the paper's 2, or on one type, 4."""
    typed = facts_view(TYPED, ran_on=2)
    assert sum(PolluxPolicy().optimize([typed], TYPED, NOW).allocations["a"]) == 8
    assert sum(PolluxPolicy(explore=2).optimize([typed], TYPED, NOW).allocations["a"]) == 4
    plain = facts_view(ONE_TYPE, ran_on=2)
    assert sum(PolluxPolicy().optimize([plain], ONE_TYPE, NOW).allocations["a"]) == 4
    assert sum(PolluxPolicy(remaining_work=True).optimize([plain], ONE_TYPE, NOW).allocations["a"]) == 8


def test_explore_below_one_is_refused_in_one_line():
    with pytest.raises(SpecError, match="explore must be a number ≥ 1"):
        PolluxPolicy(explore=0.5)

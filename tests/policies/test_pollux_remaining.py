"""The Pollux policy's use of a job's remaining work (`pollux.policies.remaining`): its estimate from the declared
epochs, the shortest-remaining-first weights, and restarts weighed against the time a job has left."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from pollux_jobs import NOW, job

from pollux.cluster import Cluster, NodeGroup
from pollux.policies.facts import remaining_m0_steps
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.remaining import WEIGHT_CAP, finish_factor, remaining_time_s, srpt_weights
from pollux.policies.speedup import speedups_and_base
from pollux.policies.typed_search import type_slices, typed_value_tables

CLUSTER = Cluster(num_nodes=2, gpus_per_node=4)


def test_the_work_left_is_the_progress_per_epoch_so_far_times_the_epochs_left():
    assert remaining_m0_steps(m0_steps=300.0, epochs_done=3.0, epochs=10) == 700.0
    assert remaining_m0_steps(m0_steps=300.0, epochs_done=2.5, epochs=10) == 900.0
    assert remaining_m0_steps(m0_steps=300.0, epochs_done=10.0, epochs=10) == 0.0


def test_the_work_left_is_unknown_without_declared_epochs_or_before_any_progress():
    assert remaining_m0_steps(m0_steps=300.0, epochs_done=3.0, epochs=None) is None
    assert remaining_m0_steps(m0_steps=0.0, epochs_done=0.0, epochs=10) is None


def test_the_time_left_is_the_work_left_over_the_goodput_on_the_fair_share():
    view = job("a", remaining_m0_steps=100.0)  # M0 = 128
    assert remaining_time_s(view, base_goodput=64.0) == 100.0 * 128 / 64.0
    assert remaining_time_s(job("b"), base_goodput=64.0) is None


def test_a_job_nearer_its_end_weighs_more_within_the_cap_and_an_unknown_one_weighs_one():
    weights = srpt_weights([100.0, 400.0, 1600.0, None], exponent=1.0)
    np.testing.assert_array_equal(weights, [4.0, 1.0, 0.25, 1.0])  # 400 s is the median of the known times
    np.testing.assert_array_equal(srpt_weights([1.0, 400.0, 1e9], exponent=1.0), [WEIGHT_CAP, 1.0, 1 / WEIGHT_CAP])
    np.testing.assert_array_equal(srpt_weights([100.0, 1600.0, None], exponent=0.0), np.ones(3))


def test_a_restart_costs_more_against_a_short_remainder():
    speedups = np.array([1.0, 2.0, 4.0])
    near_end = finish_factor(speedups, remaining_s=120.0, delay_s=60.0)
    far_off = finish_factor(speedups, remaining_s=12000.0, delay_s=60.0)
    np.testing.assert_allclose(near_end, [120 / 180, 60 / 120, 30 / 90])
    assert np.all(far_off > near_end)
    assert finish_factor(speedups, remaining_s=None, delay_s=60.0) == 1.0


def test_off_the_values_are_the_papers_whatever_the_jobs_know():
    """remaining_work off (by default on a one-type cluster; set, on any): a job's remaining work changes no value
    (the paper's Pollux)."""
    jobs = [job("a", remaining_m0_steps=10.0), job("b", remaining_m0_steps=1e6), job("c")]
    blind = [replace(j, remaining_m0_steps=None) for j in jobs]
    for policy in (PolluxPolicy(), PolluxPolicy(remaining_work=False)):
        np.testing.assert_array_equal(
            policy.value_table(jobs, CLUSTER, NOW).table, policy.value_table(blind, CLUSTER, NOW).table
        )
    typed = Cluster.of_groups([NodeGroup("t4", 2, 4), NodeGroup("a100", 1, 8)])
    paper = PolluxPolicy(remaining_work=False)
    for told, untold in zip(
        typed_value_tables(paper, jobs, typed, type_slices(typed), NOW),
        typed_value_tables(paper, blind, typed, type_slices(typed), NOW),
        strict=True,
    ):
        np.testing.assert_array_equal(told.table, untold.table)


def test_by_default_remaining_work_is_weighed_on_clusters_of_several_types_only():
    policy = PolluxPolicy()
    assert not policy.uses_remaining_work(CLUSTER)
    assert policy.uses_remaining_work(Cluster.of_groups([NodeGroup("t4", 2, 4), NodeGroup("a100", 1, 8)]))
    assert PolluxPolicy(remaining_work=True).uses_remaining_work(CLUSTER)


def test_weighing_remaining_work_the_job_nearer_its_end_gets_more_gpus():
    """Two jobs alike but for the work they have left, on fewer GPUs than both would use: the paper's Pollux
    splits them evenly; weighing remaining work, the nearly done one gets more."""
    near, far = job("near", remaining_m0_steps=50.0), job("far", remaining_m0_steps=5000.0)
    even = PolluxPolicy().optimize([near, far], CLUSTER, NOW).allocations
    assert sum(even["near"]) == sum(even["far"])
    srpt = PolluxPolicy(remaining_work=True).optimize([near, far], CLUSTER, NOW).allocations
    assert sum(srpt["near"]) > sum(srpt["far"])


def test_weighing_remaining_work_a_job_near_its_end_is_not_grown_for_a_gain_its_restart_would_eat():
    """A job on 2 GPUs, alone on 8, with 10 s left at its fair share: growing it would cost more restart (60 s) than
    it saves; with far more left it grows, and the paper's Pollux grows it either way."""
    cluster = Cluster(num_nodes=1, gpus_per_node=8)
    base = job("a", cluster, allocation=(2,), submit_time_s=0.0, max_gpus=8, restart_delay_s=60.0)
    _, fair_goodput = speedups_and_base(base, 8, 8)
    near_end = replace(base, remaining_m0_steps=10.0 * fair_goodput / base.init_batch_size)
    far_off = replace(base, remaining_m0_steps=1e5 * fair_goodput / base.init_batch_size)
    policy = PolluxPolicy(remaining_work=True)
    assert policy.optimize([near_end], cluster, NOW).allocations["a"] == (2,)
    assert policy.optimize([far_off], cluster, NOW).allocations["a"] == (8,)
    assert PolluxPolicy().optimize([near_end], cluster, NOW).allocations["a"] == (8,)


def test_the_typed_search_weighs_remaining_work_as_the_one_type_search_does():
    """On one type's nodes, the typed search's values are the one-type search's, remaining work weighed alike."""
    cluster = Cluster.of_groups([NodeGroup("a100", 2, 4)])
    jobs = [
        job("near", cluster, remaining_m0_steps=50.0, allocation=(2, 0)),
        job("far", cluster, remaining_m0_steps=5000.0),
    ]
    policy = PolluxPolicy(remaining_work=True)
    (typed,) = typed_value_tables(policy, jobs, cluster, type_slices(cluster), NOW)
    plain = policy.value_table(jobs, cluster, NOW)
    np.testing.assert_allclose(typed.table, plain.table, rtol=1e-12)
    paper = PolluxPolicy(remaining_work=False).value_table(jobs, cluster, NOW)
    assert not np.allclose(plain.table[:, :, 1:], paper.table[:, :, 1:])

"""Tiresias: discretized 2D-LAS queues, demotion, starvation promotion, 2D-Gittins, consolidation."""

import numpy as np
import pytest
from policy_jobs import view

from pollux.cluster import Cluster
from pollux.errors import SpecError
from pollux.policies.tiresias import GittinsIndex, TiresiasPolicy

ONE_NODE = Cluster(num_nodes=1, gpus_per_node=4)
TWO_NODES = Cluster(num_nodes=2, gpus_per_node=4)


def test_the_default_is_the_artifacts_two_queues_split_at_16_gpu_hours():
    policy = TiresiasPolicy()
    assert policy.queue_of(16 * 3600 - 1) == 0
    assert policy.queue_of(16 * 3600) == 1
    assert policy.queue_of(1e9) == 1


def test_a_job_crossing_the_threshold_is_demoted_and_preempted_by_one_with_less_service():
    policy = TiresiasPolicy(queue_thresholds_gpu_s=(1000,))
    first = policy.optimize([view("a", submit=0, gpus=4, num_nodes=1)], ONE_NODE, now=0)
    assert first.allocations == {"a": (4,)}
    below = [
        view("a", submit=0, gpus=4, num_nodes=1, allocation=(4,), service=960),
        view("b", submit=30, gpus=4, num_nodes=1),
    ]
    second = policy.optimize(below, ONE_NODE, now=240)
    assert second.allocations == {"a": (4,)}  # same queue, a came first
    crossed = [view("a", submit=0, gpus=4, num_nodes=1, allocation=(4,), service=1200), below[1]]
    third = policy.optimize(crossed, ONE_NODE, now=300)
    assert third.info["queue"] == {"a": 1, "b": 0}
    assert third.allocations == {"b": (4,)}
    assert third.reasons["a"] == "waiting in queue 1: needs 4 GPUs, 0 free after 1 higher-priority jobs"


def starving_round(policy, now):
    jobs = [
        view("c", submit=0, gpus=4, allocation=(0, 4), service=2000),
        view("a", submit=5, gpus=4, service=2000),
        view("b", submit=10, gpus=4, allocation=(4, 0), service=100),
    ]
    return policy.optimize(jobs, TWO_NODES, now)


@pytest.mark.parametrize("starvation_s", [None, 300.0])
def test_a_starving_job_is_promoted_to_the_top_queue_only_with_the_knob(starvation_s):
    policy = TiresiasPolicy(queue_thresholds_gpu_s=(1000,), starvation_s=starvation_s)
    first = starving_round(policy, now=0)
    assert first.allocations == {"b": (4, 0), "c": (0, 4)}  # a entered queue 1 with c, after it
    later = starving_round(policy, now=400)  # a has waited 400 s since it last ran
    if starvation_s is None:
        assert later.allocations == first.allocations
        assert later.info["queue"]["a"] == 1
    else:
        assert later.info["queue"]["a"] == 0
        assert later.allocations == {"b": (4, 0), "a": (0, 4)}
        assert "queue 1" in later.reasons["c"]


def test_a_job_that_stays_scheduled_keeps_its_nodes():
    jobs = [view("a", submit=0, gpus=2, allocation=(0, 2)), view("b", submit=1, gpus=4)]
    result = TiresiasPolicy().optimize(jobs, TWO_NODES, now=60)
    assert result.allocations == {"a": (0, 2), "b": (4, 0)}


def test_a_later_job_may_start_when_an_earlier_one_does_not_fit_as_in_the_artifact():
    jobs = [
        view("run", submit=0, gpus=6, allocation=(4, 2)),
        view("big", submit=1, gpus=4),
        view("s", submit=2, gpus=2),
    ]
    result = TiresiasPolicy().optimize(jobs, TWO_NODES, now=60)
    assert result.allocations == {"run": (4, 2), "s": (0, 2)}
    assert result.reasons["big"] == "waiting in queue 0: needs 4 GPUs, 2 free after 1 higher-priority jobs"


def test_gittins_index_is_the_best_ratio_over_every_quantum():
    rng = np.random.default_rng(3)
    samples = rng.lognormal(5, 2, 300).round()
    index = GittinsIndex(samples)
    for attained in [0.0, 10.0, 150.0, float(np.median(samples)), 5000.0]:
        tail = samples[samples > attained] - attained
        deltas = np.concatenate([tail, np.geomspace(1e-3, tail.max() * 2, 500)])
        ratios = [np.mean(tail <= d) / np.mean(np.minimum(tail, d)) for d in deltas]
        assert index(attained) == pytest.approx(max(ratios), rel=1e-9)
    assert index(samples.max()) == 0.0


def test_gittins_mode_favours_a_job_near_a_likely_completion_point():
    # Half the past jobs end at 10 GPU-s, half at 100: a job at 5 GPU-s is likely to finish soon (index 0.1),
    # one at 0 GPU-s less so (0.05). LAS would keep FIFO order within the queue.
    samples = [10.0] * 50 + [100.0] * 50
    jobs = [view("fresh", submit=0, gpus=4, num_nodes=1), view("close", submit=1, gpus=4, num_nodes=1, service=5)]
    gittins = TiresiasPolicy(mode="gittins", gittins_service_samples=samples).optimize(jobs, ONE_NODE, now=0)
    assert gittins.info["gittins_index"] == pytest.approx({"fresh": 0.05, "close": 0.1})
    assert gittins.allocations == {"close": (4,)}
    las = TiresiasPolicy().optimize(jobs, ONE_NODE, now=0)
    assert las.allocations == {"fresh": (4,)}


def test_consolidated_jobs_wait_rather_than_spread():
    jobs = [view("x", submit=0, gpus=4, allocation=(2, 2)), view("y", submit=1, gpus=4, application="imagenet")]
    spread = TiresiasPolicy().optimize(jobs, TWO_NODES, now=60)
    assert spread.allocations["y"] == (2, 2)
    packed = TiresiasPolicy(consolidate={"imagenet"}).optimize(jobs, TWO_NODES, now=60)
    assert "y" not in packed.allocations
    assert "consolidated" in packed.reasons["y"]


def test_the_placement_sensitive_flag_consolidates_only_when_asked():
    jobs = [view("x", submit=0, gpus=4, allocation=(2, 2)), view("y", submit=1, gpus=4, placement_sensitive=True)]
    assert "y" in TiresiasPolicy().optimize(jobs, TWO_NODES, now=60).allocations
    assert "y" not in TiresiasPolicy(consolidate_sensitive=True).optimize(jobs, TWO_NODES, now=60).allocations


@pytest.mark.parametrize(
    "options",
    [
        {"queue_thresholds_gpu_s": (100, 50)},
        {"queue_thresholds_gpu_s": (0,)},
        {"mode": "gittins"},
        {"mode": "srtf"},
        {"starvation_s": -1},
        {"mode": "gittins", "gittins_service_samples": []},
    ],
)
def test_bad_options_are_spec_errors(options):
    with pytest.raises(SpecError):
        TiresiasPolicy(**options)


def test_a_demoted_job_joins_the_back_of_the_lower_queue_and_is_forgotten_when_gone():
    policy = TiresiasPolicy(queue_thresholds_gpu_s=(1000,))
    a = view("a", submit=10, gpus=4, num_nodes=1, service=1500)
    first = policy.optimize([a, view("b", submit=0, gpus=4, num_nodes=1, service=500)], ONE_NODE, now=0)
    assert first.allocations == {"b": (4,)}
    b = view("b", submit=0, gpus=4, num_nodes=1, allocation=(4,), service=1100)
    second = policy.optimize([a, b], ONE_NODE, now=60)
    assert second.info["queue"] == {"a": 1, "b": 1}
    assert second.allocations == {"a": (4,)}  # a entered queue 1 first, though b was submitted first
    policy.optimize([b], ONE_NODE, now=120)  # a leaves: its history goes
    assert policy.optimize([a, b], ONE_NODE, now=180).allocations == {"b": (4,)}

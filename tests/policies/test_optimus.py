"""Optimus: one GPU each, then greedy marginal gain in predicted remaining time, within each job's bound."""

from dataclasses import replace

from policy_jobs import PARAMS, view

from pollux.cluster import Cluster
from pollux.policies.optimus import OptimusPolicy

CLUSTER = Cluster(num_nodes=2, gpus_per_node=4)
SLOW_SYNC = replace(PARAMS, alpha_r=2.0, alpha_n=4.0)  # sync dwarfs compute: more GPUs do not help


def gpus(result, name):
    return sum(result.allocations.get(name, ()))


def test_more_remaining_work_gets_more_gpus():
    jobs = [view("short", submit=0, params=PARAMS, remaining=100), view("long", submit=1, params=PARAMS, remaining=1e5)]
    result = OptimusPolicy().optimize(jobs, CLUSTER, now=0)
    assert gpus(result, "long") > gpus(result, "short") >= 1
    assert gpus(result, "long") + gpus(result, "short") == 8


def test_better_scaling_gets_more_gpus():
    jobs = [
        view("slow", submit=0, params=SLOW_SYNC, remaining=1e4),
        view("fast", submit=1, params=PARAMS, remaining=1e4),
    ]
    result = OptimusPolicy().optimize(jobs, CLUSTER, now=0)
    assert (gpus(result, "slow"), gpus(result, "fast")) == (1, 7)


def test_the_bound_is_max_gpus_and_batch_over_min_local_batch():
    jobs = [
        view("capped", submit=0, params=PARAMS, remaining=1e6, max_gpus=3),
        view("small_batch", submit=1, params=PARAMS, remaining=1e6, batch_size=128, local_bsz_bounds=(64, 256)),
    ]
    result = OptimusPolicy().optimize(jobs, CLUSTER, now=0)
    assert gpus(result, "capped") == 3
    assert gpus(result, "small_batch") == 2  # 128 // 64
    assert sum(gpus(result, j.name) for j in jobs) == 5  # GPUs left idle rather than break a bound


def test_every_job_gets_one_gpu_before_any_gets_two_oldest_first():
    jobs = [view(f"j{i}", submit=float(i), params=PARAMS, remaining=1e5) for i in range(10)]
    result = OptimusPolicy().optimize(jobs[::-1], CLUSTER, now=0)
    assert {name: sum(a) for name, a in result.allocations.items()} == {f"j{i}": 1 for i in range(8)}
    assert set(result.reasons) == {"j8", "j9"}


def test_a_job_whose_gpu_count_is_unchanged_keeps_its_nodes():
    jobs = [view("a", submit=0, params=PARAMS, remaining=1e4, max_gpus=2, allocation=(0, 2))]
    result = OptimusPolicy().optimize(jobs, CLUSTER, now=60)
    assert result.allocations == {"a": (0, 2)}


def test_an_unmeasured_job_is_assumed_to_scale_linearly():
    result = OptimusPolicy().optimize([view("new", params=None, remaining=10, max_gpus=5)], CLUSTER, now=0)
    assert gpus(result, "new") == 5


def test_a_step_time_oracle_sees_packed_placements_and_decides():
    calls = []

    def oracle(job, placement, local_bsz, accum_steps):
        calls.append((job.name, placement, local_bsz, accum_steps))
        gpus_used = sum(placement)
        return 1.0 / gpus_used if job.name == "scales" else 1.0  # "flat" gains nothing from more GPUs

    jobs = [view("flat", submit=0, remaining=1e4), view("scales", submit=1, remaining=10)]
    result = OptimusPolicy(step_time=oracle).optimize(jobs, CLUSTER, now=0)
    assert gpus(result, "scales") == 7 and gpus(result, "flat") == 1
    assert ("scales", (4, 2), 86, 0) in calls  # 512 over 6 GPUs, packed 4 per node
    assert ("flat", (1,), 256, 1) in calls  # one GPU: at least one accumulation step, as the artifact predicts


def test_equal_gains_go_to_the_older_job():
    jobs = [view("young", submit=5, remaining=100), view("old", submit=1, remaining=100)]
    result = OptimusPolicy(step_time=lambda job, placement, m, s: 1.0 / sum(placement)).optimize(
        jobs, Cluster(num_nodes=1, gpus_per_node=3), now=0
    )
    assert result.allocations == {"young": (1,), "old": (2,)}


def test_only_the_fitted_default_needs_throughput_params():
    assert OptimusPolicy().uses_throughput_model
    assert not OptimusPolicy(step_time=lambda job, placement, m, s: 1.0).uses_throughput_model

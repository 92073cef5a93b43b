"""Pollux's re-allocation factor on jobs that hold no GPUs: the artifact's rule (simulator) and the runtime's."""

from dataclasses import replace

import numpy as np
from policy_jobs import view

from pollux.cluster import Cluster
from pollux.policies.pollux import PolluxPolicy

CLUSTER = Cluster(num_nodes=1, gpus_per_node=4)
NOW = 1000.0


def waiting(name: str, age_s: float, restarts: int = 0):
    return replace(view(name, submit=NOW - age_s, num_nodes=1, max_gpus=4), num_restarts=restarts)


def test_the_artifacts_rule_values_a_just_submitted_jobs_start_at_nothing():
    result = PolluxPolicy().optimize([waiting("new", age_s=0.0)], CLUSTER, NOW)
    assert result.allocations == {}  # (T - R*delta) / (T + delta) = 0: four GPUs idle until the next round


def test_a_waiting_job_starts_on_idle_gpus_whatever_its_age_and_restarts_when_starts_are_not_discounted():
    policy = PolluxPolicy(discount_starts=False)
    for job in (waiting("new", age_s=0.0), waiting("retried", age_s=20.0, restarts=1)):
        assert PolluxPolicy().optimize([job], CLUSTER, NOW).allocations == {}  # the artifact: T <= R*delta
        assert sum(policy.optimize([job], CLUSTER, NOW).allocations[job.name]) == 4


def test_changes_of_running_jobs_are_discounted_the_same_either_way():
    rng = np.random.default_rng(7)
    for _ in range(20):
        jobs = [
            replace(
                view(f"job-{i}", submit=float(rng.uniform(0, NOW)), num_nodes=1, allocation=(int(g),), max_gpus=4),
                num_restarts=int(rng.integers(0, 4)),
            )
            for i, g in enumerate(rng.multinomial(4, [0.25] * 4))
            if g > 0
        ]
        plain, runtime = PolluxPolicy(), PolluxPolicy(discount_starts=False)
        assert plain.optimize(jobs, CLUSTER, NOW).allocations == runtime.optimize(jobs, CLUSTER, NOW).allocations
        for job in jobs:
            assert plain.realloc_factor(job, NOW) == runtime.realloc_factor(job, NOW)

"""FIFO: strict submit order, each job its own GPU count, never preempts."""

from policy_jobs import view

from pollux.cluster import Cluster
from pollux.policies.fifo import FifoPolicy

CLUSTER = Cluster(num_nodes=2, gpus_per_node=4)


def test_a_job_that_fits_may_not_jump_the_queue():
    jobs = [
        view("running", submit=0, gpus=6, allocation=(4, 2)),
        view("big", submit=10, gpus=4),
        view("small", submit=20, gpus=1),  # 2 GPUs are free, but "big" is first in line
    ]
    result = FifoPolicy().optimize(jobs, CLUSTER, now=60)
    assert set(result.allocations) == {"running"}
    assert result.reasons["big"] == "waiting: needs 4 GPUs, 2 free; 0 jobs ahead"
    assert result.reasons["small"] == "waiting: needs 1 GPUs, 2 free; 1 jobs ahead"


def test_running_jobs_keep_their_gpus_even_when_an_older_job_waits():
    jobs = [view("old", submit=0, gpus=8), view("young", submit=5, gpus=4, allocation=(0, 4))]
    result = FifoPolicy().optimize(jobs, CLUSTER, now=60)
    assert result.allocations == {"young": (0, 4)}
    assert "old" in result.reasons


def test_jobs_start_in_submit_order_when_their_gpus_fit():
    jobs = [view("b", submit=5, gpus=3), view("a", submit=1, gpus=4), view("c", submit=9, gpus=2)]
    result = FifoPolicy().optimize(jobs, CLUSTER, now=60)
    assert result.allocations == {"a": (4, 0), "b": (0, 3)}
    assert result.reasons == {"c": "waiting: needs 2 GPUs, 1 free; 0 jobs ahead"}


def test_a_job_larger_than_the_cluster_does_not_block_the_queue():
    jobs = [view("huge", submit=0, gpus=9), view("next", submit=1, gpus=2)]
    result = FifoPolicy().optimize(jobs, CLUSTER, now=0)
    assert result.allocations == {"next": (2, 0)}
    assert result.reasons["huge"] == "waiting: needs 9 GPUs, the cluster has 8"


def test_fixed_batch_is_split_over_the_gpus_given():
    result = FifoPolicy().optimize([view("a", gpus=6, batch_size=2048)], CLUSTER, now=0)
    assert result.allocations == {"a": (4, 2)}
    assert (result.batch["a"].local_bsz, result.batch["a"].accum_steps) == (171, 1)

"""Leases (`pollux.lease`): a job just started or moved keeps its GPUs whatever the policy says, the policy's other
changes stand where they still fit, and nothing changes where the policy leaves every lease alone."""

import pytest

from pollux.cluster import Cluster
from pollux.lease import Lease, keep_leases
from pollux.policies.base import JobView

CLUSTER = Cluster(2, 4)
LEASE = Lease(min_run_s=60.0, restore_delay_s=30.0)


def view(name: str, allocation: tuple[int, ...], allocated_at_s: float | None, delay: float | None = None) -> JobView:
    return JobView(
        name=name,
        application="x",
        submit_time_s=0.0,
        allocation=allocation,
        num_restarts=0,
        attained_service_gpu_s=0.0,
        requested_gpus=1,
        max_gpus=8,
        init_batch_size=32,
        max_batch_size=256,
        local_bsz_bounds=(8, 64),
        restart_delay_s=delay,
        allocated_at_s=allocated_at_s,
    )


def test_a_lease_lasts_the_jobs_own_restore_delay_else_the_default_then_min_run():
    assert LEASE.ends_at(view("a", (2, 0), 100.0)) == 190.0
    assert LEASE.ends_at(view("a", (2, 0), 100.0, delay=250.0)) == 410.0
    assert LEASE.ends_at(view("a", (0, 0), None)) is None  # waiting: nothing to lease
    with pytest.raises(ValueError, match="min_run_s"):
        Lease(min_run_s=-1.0)


def test_a_leased_job_keeps_its_gpus_and_a_job_given_them_waits_while_other_changes_stand():
    jobs = [view("young", (4, 0), 100.0), view("old", (0, 2), 0.0), view("new", (0, 0), None)]
    wanted = {"new": (4, 0), "old": (0, 4)}  # the policy preempts young for new, and grows old
    kept, reasons, due = keep_leases(jobs, wanted, CLUSTER, 150.0, LEASE, avoid_sharing=True)
    assert kept == {"young": (4, 0), "old": (0, 4)}
    assert reasons["young"].startswith("keeps its GPUs: leased for 40 s more")
    assert reasons["new"] == "waits: the GPUs it was given are leased to another job"
    assert due == 190.0


def test_a_job_moved_onto_leased_gpus_stays_where_it_was():
    jobs = [view("young", (2, 0), 100.0), view("mover", (0, 2), 0.0)]
    wanted = {"young": (0, 2), "mover": (4, 0)}  # the policy swaps them
    kept, reasons, _ = keep_leases(jobs, wanted, CLUSTER, 150.0, LEASE, avoid_sharing=False)
    assert kept == {"young": (2, 0), "mover": (0, 2)}
    assert reasons["mover"] == "keeps its GPUs: the ones it was given are leased to another job"


def test_interference_avoidance_holds_beside_a_leased_distributed_job():
    jobs = [view("spread", (1, 1), 100.0), view("other", (0, 0), None)]
    wanted = {"other": (2, 2)}  # fits the free GPUs, but would share both nodes with another distributed job
    kept, _, _ = keep_leases(jobs, {**wanted, "spread": (0, 0)}, CLUSTER, 150.0, LEASE, avoid_sharing=True)
    assert kept == {"spread": (1, 1)}
    kept, _, _ = keep_leases(jobs, {**wanted, "spread": (0, 0)}, CLUSTER, 150.0, LEASE, avoid_sharing=False)
    assert kept == {"spread": (1, 1), "other": (2, 2)}


def test_the_policys_allocations_stand_untouched_once_leases_end_or_when_it_breaks_none():
    jobs = [view("young", (4, 0), 100.0), view("new", (0, 0), None)]
    wanted = {"new": (4, 0)}
    assert keep_leases(jobs, wanted, CLUSTER, 190.0, LEASE, avoid_sharing=True) == (wanted, {}, None)
    same = {"young": (4, 0), "new": (0, 4)}
    assert keep_leases(jobs, same, CLUSTER, 150.0, LEASE, avoid_sharing=True) == (same, {}, None)

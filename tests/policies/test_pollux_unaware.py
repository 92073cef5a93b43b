"""The Sia paper's heterogeneity-unaware Pollux: Pollux on 4-GPU virtual nodes, one real GPU type per job after."""

from __future__ import annotations

import itertools

import numpy as np
from policy_jobs import run_rounds
from pollux_jobs import job, random_job, scenarios

from pollux.cluster import Cluster, NodeGroup, validate_allocations
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.pollux_unaware import PolluxUnawarePolicy, VirtualCluster
from pollux.policies.registry import PolicySettings, make_policy

SIA = Cluster.of_groups([NodeGroup("aws", 2, 4), NodeGroup("rtx", 1, 8), NodeGroup("dgx-ext", 1, 8)])


def test_nodes_are_cut_into_4_gpu_virtual_nodes_and_the_rest() -> None:
    real = Cluster.of_groups([NodeGroup("aws", 2, 4), NodeGroup("rtx", 1, 8), NodeGroup("odd", 1, 6)])
    split = VirtualCluster.of(real)
    assert split.virtual.node_gpus == (4, 4, 4, 4, 4, 2)
    assert split.virtual.gpu_types == ("aws",)  # one type: Pollux sees no difference
    assert split.owner == (0, 1, 2, 2, 3, 3)
    assert split.to_real((1, 0, 4, 3, 0, 2)) == (1, 0, 7, 2)


def test_a_job_split_across_types_keeps_the_type_holding_most_of_its_gpus_ties_to_the_faster() -> None:
    real = Cluster.of_groups([NodeGroup("aws", 2, 4), NodeGroup("rtx", 1, 8), NodeGroup("quad", 1, 4)])
    split = VirtualCluster.of(real)  # virtual nodes: aws, aws, rtx, rtx, quad
    assert split.keep_one_type((4, 2, 4, 0, 0)) == (4, 2, 0, 0, 0)  # 6 T4 beat 4 RTX
    assert split.keep_one_type((4, 0, 4, 0, 0)) == (0, 0, 4, 0, 0)  # a tie: the RTX 2080Ti beats the T4
    assert split.keep_one_type((0, 0, 2, 2, 4)) == (0, 0, 0, 0, 4)  # a tie: the Quadro beats the RTX
    a100 = VirtualCluster.of(Cluster.of_groups([NodeGroup("azure", 1, 8), NodeGroup("dgx-ext", 1, 8)]))
    assert a100.keep_one_type((4, 0, 0, 4)) == (0, 0, 0, 4)  # A100 over V100


def test_real_allocations_are_shown_on_virtual_nodes_as_remembered_else_split_best_fit() -> None:
    cluster = Cluster(1, 8, "rtx")
    split = VirtualCluster.of(cluster)
    jobs = [job(name, cluster, allocation=alloc) for name, alloc in (("a", (2,)), ("b", (2,)), ("c", (3,)))]
    assert split.to_virtual(jobs, {}) == {"c": (3, 0), "a": (0, 2), "b": (0, 2)}
    remembered = {"a": (1, 1), "b": (0, 2), "c": (3, 0)}  # a straddles the halves: shown as it was left
    assert split.to_virtual(jobs, remembered) == remembered
    spread = [job("d", cluster, allocation=(6,))]
    assert split.to_virtual(spread, {"d": (4, 1)}) == {"d": (4, 2)}  # forgotten once it no longer matches


def test_on_a_uniform_4_gpu_cluster_it_decides_exactly_as_pollux_round_after_round() -> None:
    for cluster, jobs, seed in scenarios(21, 12):
        uniform = Cluster(cluster.num_nodes, 4)
        jobs = [random_job(np.random.default_rng(seed + i), j.name, uniform) for i, j in enumerate(jobs)]
        ours = run_rounds(PolluxUnawarePolicy(), uniform, jobs, np.random.default_rng(seed), rounds=5)
        theirs = run_rounds(PolluxPolicy(), uniform, jobs, np.random.default_rng(seed), rounds=5)
        for (_, mine), (_, reference) in zip(ours, theirs, strict=True):
            assert mine.allocations == reference.allocations
            assert mine.reasons == reference.reasons


def test_random_typed_rounds_keep_real_node_capacity_and_never_mix_gpu_types() -> None:
    rng = np.random.default_rng(8)
    for _ in range(8):
        groups = [NodeGroup("aws", int(rng.integers(1, 4)), 4), NodeGroup("rtx", int(rng.integers(1, 3)), 8)]
        if rng.random() < 0.5:
            groups.append(NodeGroup("dgx-ext", 1, 8))
        cluster = Cluster.of_groups(groups)
        jobs = [random_job(rng, f"job-{i}", cluster) for i in range(int(rng.integers(2, 12)))]
        policy = PolluxUnawarePolicy()
        for views, result in run_rounds(policy, cluster, jobs, rng, rounds=6):
            validate_allocations(cluster, result.allocations)  # capacity on real nodes; one type per job
            assert set(result.reasons) == {v.name for v in views} - set(result.allocations)
            assert all(sum(alloc) > 0 for alloc in result.allocations.values())


def test_pollux_sees_every_job_on_the_virtual_gpus_it_gave_it_last_round(monkeypatch) -> None:
    """So a job Pollux keeps stays on its exact real GPUs, even where a fresh split of its real GPUs onto the
    halves of an 8-GPU node would differ (a job straddling both halves, a neighbour on one)."""
    calls: list[tuple[dict, dict]] = []
    original = PolluxPolicy.optimize

    def recording(self, jobs, cluster, now):
        result = original(self, jobs, cluster, now)
        calls.append(({j.name: j.allocation for j in jobs}, dict(result.allocations)))
        return result

    monkeypatch.setattr(PolluxPolicy, "optimize", recording)
    rng = np.random.default_rng(15)
    cluster = Cluster.of_groups([NodeGroup("rtx", 3, 8), NodeGroup("aws", 1, 4)])
    split = VirtualCluster.of(cluster)
    for _ in range(4):
        jobs = [random_job(rng, f"job-{i}", cluster) for i in range(int(rng.integers(6, 14)))]
        calls.clear()
        run_rounds(PolluxUnawarePolicy(), cluster, jobs, rng, rounds=6)
        for (_, given), (shown, _) in itertools.pairwise(calls):
            for name, virtual in given.items():
                if name in shown:
                    assert shown[name] == split.keep_one_type(virtual)


def test_it_is_built_from_pollux_settings_and_says_it_neither_tells_types_apart_nor_avoids_real_sharing() -> None:
    policy = make_policy("pollux-unaware", PolicySettings(restart_delay_s=50.0, p=0.5, discount_starts=False))
    assert isinstance(policy, PolluxUnawarePolicy)
    assert (policy.restart_delay_s, policy.p, policy.discount_starts) == (50.0, 0.5, False)
    assert policy.avoid_interference  # on the virtual nodes
    assert not policy.gpu_type_aware and not policy.avoids_sharing and policy.batch_owner == "job"

"""The Pollux search's shared state: one value per job and row however it is asked for, a layout whose per-job and
per-node facts always agree with its rows, trials that undo exactly, and growth that keeps the placement rules."""

from dataclasses import replace

import numpy as np
import pytest
from pollux_jobs import NOW, assert_consistent, job, random_job, scenarios, snapshot

from pollux.cluster import Cluster
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.search_state import Layout, ValueTable, dense_row, greedy_counts, grow, sparse_row
from pollux.policies.speedup import speedup_table


def value_tables(seed: int, count: int):
    """(policy, cluster, value table, rng, jobs) of random rounds whose jobs hold what a round before gave them."""
    rng = np.random.default_rng(seed)
    for cluster, jobs, _ in scenarios(seed, count, max_jobs=16):
        policy = PolluxPolicy(avoid_interference=bool(rng.random() < 0.75))
        before = policy.optimize(jobs, cluster, NOW - 60)
        jobs = [replace(j, allocation=before.allocations.get(j.name, cluster.empty())) for j in jobs]
        yield policy, cluster, policy.value_table(jobs, cluster, NOW), rng, jobs


def random_row(rng: np.random.Generator, cluster: Cluster) -> dict[int, int]:
    nodes = rng.choice(cluster.num_nodes, size=int(rng.integers(0, min(3, cluster.num_nodes) + 1)), replace=False)
    return {int(n): int(rng.integers(1, cluster.gpus_per_node + 1)) for n in nodes}


def test_sparse_and_dense_rows_round_trip():
    for alloc in [(0, 0, 0), (0, 4, 0, 1), (300, 0), tuple(range(5))]:
        assert dense_row(sparse_row(alloc), len(alloc)) == alloc


def test_a_job_has_one_value_for_a_row_however_it_is_asked():
    """`ValueTable.of`, the value a layout keeps for the job, and `evaluate` over a whole matrix agree, kept
    allocations included."""
    for _, cluster, values, rng, _ in value_tables(1, 30):
        layout = Layout(values)
        states = np.zeros((1, values.num_jobs, cluster.num_nodes), dtype=np.int64)
        for j in range(values.num_jobs):
            row = dict(values.current[j]) if rng.random() < 0.4 else random_row(rng, cluster)
            layout.set(j, row)
            states[0, j] = dense_row(row, cluster.num_nodes)
            assert layout.value[j] == values.of(j, row)
        np.testing.assert_array_equal(values.evaluate(states)[0], layout.value)


def test_the_layout_stays_consistent_after_any_sequence_of_changes():
    for _, cluster, values, rng, _ in value_tables(2, 30):
        layout = Layout(values)
        for _ in range(40):
            layout.set(int(rng.integers(values.num_jobs)), random_row(rng, cluster))
            assert_consistent(layout)


def test_changes_recorded_in_a_trial_undo_exactly():
    for _, cluster, values, rng, _ in value_tables(3, 30):
        layout = Layout(values, [random_row(rng, cluster) for _ in range(values.num_jobs)])
        before = snapshot(layout)
        layout.begin()
        changed = set()
        for _ in range(int(rng.integers(1, 12))):
            j = int(rng.integers(values.num_jobs))
            changed.add(j)
            layout.set(j, random_row(rng, cluster))
        assert set(layout.changed()) == changed
        layout.undo()
        after = snapshot(layout)
        assert after[0] == before[0] and after[2] == before[2]
        for mine, theirs in zip(after[1], before[1], strict=True):
            np.testing.assert_array_equal(mine, theirs)
        assert_consistent(layout)


@pytest.mark.parametrize("reshape", [True, False])
def test_growing_keeps_the_placement_rules_and_only_raises_the_values(reshape):
    for policy, _, values, rng, jobs in value_tables(4 + reshape, 40):
        layout = policy._place(values, policy._counts(values, jobs))
        growing = rng.permutation(values.num_jobs)[: int(rng.integers(1, values.num_jobs + 1))].tolist()
        rows_before, values_before = [dict(r) for r in layout.rows], layout.value.copy()
        grow(layout, growing, policy.avoid_interference, reshape=reshape)
        assert_consistent(layout)
        assert np.all(layout.free >= 0)
        assert np.all(layout.gpus <= values.max_gpus)
        if policy.avoid_interference:
            assert np.all(layout.spanning <= 1)
        assert np.all(layout.value >= values_before)
        for j, row in enumerate(layout.rows):
            if j not in growing:
                assert row == rows_before[j]
            elif not reshape and len(rows_before[j]) == 1:
                assert set(row) == set(rows_before[j])  # grew where the counts step placed it


def test_the_speedup_table_is_one_on_the_fair_share_and_matches_the_goodput_model():
    adaptive = job("a", max_gpus=16)
    table = speedup_table(adaptive, 4, 16)
    assert table.shape == (2, 17)
    assert table[0, 4] == pytest.approx(1.0)
    assert table[0, 0] == table[1, 0] == 0.0
    fn = adaptive.goodput_fn()
    direct = fn.optimize(np.array([1, 2, 2]), np.array([2, 8, 12]), 4096, (32, 256), accumulation=True).goodput
    base = fn.optimize(1, 4, 4096, (32, 256), accumulation=True).goodput
    np.testing.assert_allclose([table[0, 2], table[1, 8], table[1, 12]], direct / base)
    assert table[1, 8] < table[0, 8]  # crossing nodes costs sync time


def test_a_job_without_a_model_scales_linearly_over_the_fair_share():
    new = replace(job("n"), throughput_params=None, grad_stats=None)
    np.testing.assert_allclose(speedup_table(new, 4, 8), np.vstack([np.arange(9), np.arange(9)]) / 4)


def test_a_value_table_bounds_every_job_by_its_maximum():
    cluster = Cluster(num_nodes=3, gpus_per_node=4)
    rng = np.random.default_rng(0)
    jobs = [random_job(rng, f"job-{i}", cluster) for i in range(6)]
    values = PolluxPolicy().value_table(jobs, cluster, NOW)
    assert isinstance(values, ValueTable)
    for j, view in enumerate(jobs):
        top = min(view.max_gpus, cluster.num_gpus)
        assert values.max_gpus[j] == top
        assert np.all(values.table[:, j, top + 1 :] == -np.inf)
        assert values.of(j, {0: 1, 1: 4, 2: 4}) == (-np.inf if top < 9 else values.table[1, j, 9])


def test_the_planned_value_of_the_current_count_is_the_better_of_moving_and_keeping():
    """What the count-first steps plan with: a count's value in its natural shape, and at the current count the
    better of that and keeping the allocation (never below what the layout would give the kept row)."""
    for _, _, values, _, _ in value_tables(6, 30):
        for j in range(values.num_jobs):
            current = int(values.current_gpus[j])
            for gpus in range(int(values.max_gpus[j]) + 1):
                planned = values.by_count(j, gpus)
                if gpus == current > 0:
                    assert planned == max(float(values.natural[j, gpus]), values.of(j, values.current[j]))
                else:
                    assert planned == values.natural[j, gpus]


def test_the_best_step_is_the_best_gain_per_gpu_over_every_larger_count_within_the_budget():
    """From any count a job may hold (a finite value), as the count greedy asks."""
    for _, _, values, rng, _ in value_tables(7, 30):
        for j in range(values.num_jobs):
            held = [k for k in range(int(values.max_gpus[j]) + 1) if np.isfinite(values.by_count(j, k))]
            have = int(rng.choice(held))
            budget = int(rng.integers(0, values.num_gpus + 1))
            ratio, target = values.best_step(j, have, budget)
            top = min(int(values.max_gpus[j]), have + budget)
            if top <= have:
                assert (ratio, target) == (-np.inf, have)
                continue
            here = values.by_count(j, have)
            gains = [(values.by_count(j, k) - here) / (k - have) for k in range(have + 1, top + 1)]
            assert have < target <= top and ratio == gains[target - have - 1]
            assert all(gain <= ratio for gain in gains)


def test_the_count_greedy_stays_within_each_tables_gpus_and_each_jobs_bounds():
    for _, cluster, values, _, jobs in value_tables(8, 30):
        kind, counts = greedy_counts([values], jobs)
        assert counts.sum() <= cluster.num_gpus
        assert np.all(counts <= values.max_gpus)
        assert np.all((kind == 0) == (counts > 0)) and np.all((kind == -1) == (counts == 0))

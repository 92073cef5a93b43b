"""The polish's moves: typed records that say which row their job gets, tried on the one layout and undone."""

from dataclasses import replace

import numpy as np
from pollux_jobs import NOW, assert_consistent, job, scenarios, snapshot

from pollux.cluster import Cluster
from pollux.policies.polish import Move, MoveKind, Polisher
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.search_state import Layout


def searched_layouts(seed: int, count: int):
    """(policy, layout after the count-first steps) of random rounds whose jobs hold what a round before gave."""
    rng = np.random.default_rng(seed)
    for cluster, jobs, _ in scenarios(seed, count, max_jobs=16):
        policy = PolluxPolicy(avoid_interference=bool(rng.random() < 0.75))
        before = policy.optimize(jobs, cluster, NOW - 60)
        jobs = [replace(j, allocation=before.allocations.get(j.name, cluster.empty())) for j in jobs]
        values = policy.value_table(jobs, cluster, NOW)
        yield policy, policy._layout(values, policy._counts(values, jobs))


def test_a_move_record_gives_its_job_the_row_its_kind_says():
    cluster = Cluster(num_nodes=3, gpus_per_node=4)
    policy = PolluxPolicy()
    jobs = [job("a", cluster, allocation=(2, 0, 0)), job("b", cluster), job("c", cluster, allocation=(0, 0, 3))]
    layout = Layout(policy.value_table(jobs, cluster, NOW), [{0: 2}, {}, {2: 3}])
    layout.set(0, {0: 1, 1: 1})
    assert Move(0, MoveKind.ONE, 3, 2).row(layout) == {2: 3}
    assert Move(0, MoveKind.GROW, 2, 2).row(layout) == {0: 1, 1: 1, 2: 2}
    assert Move(0, MoveKind.KEEP).row(layout) == {0: 2}
    # free GPUs now (3, 3, 1): at least one on each node, the freest first, then up to a node's worth
    assert Move(1, MoveKind.WIDE, 5).row(layout) == {0: 3, 1: 2}
    assert Move(1, MoveKind.WIDE, 9).row(layout) == {0: 4, 1: 4, 2: 1}


def test_every_tried_move_leaves_the_layout_as_it_was_and_reports_what_it_changes():
    tried = 0
    for policy, layout in searched_layouts(6, 25):
        polisher = Polisher(policy.avoid_interference)
        before = snapshot(layout)
        moves = [move for _, move in polisher.tries(layout)]
        moves += [Move(j, MoveKind.KEEP) for j in range(layout.num_jobs) if layout.values.keep[j] > -np.inf]
        for move in moves:
            gain, changes = polisher.gain_of(layout, move)
            after = snapshot(layout)
            assert after[0] == before[0] and after[2] == before[2]
            for mine, theirs in zip(after[1], before[1], strict=True):
                np.testing.assert_array_equal(mine, theirs)
            # applying the reported rows gives the reported gain, and a layout that keeps the rules
            trial = Layout(layout.values, layout.rows)
            for j, row in changes.items():
                trial.set(j, row)
            assert_consistent(trial)
            assert np.isclose(trial.total() - layout.total(), gain)
            assert np.all(trial.free >= 0)
            if policy.avoid_interference:
                assert np.all(trial.spanning <= 1)
            tried += 1
    assert tried > 200


def test_polishing_never_lowers_the_sum_of_values():
    for policy, layout in searched_layouts(7, 25):
        start = layout.total()
        Polisher(policy.avoid_interference).run(layout)
        assert layout.total() >= start - 1e-9
        assert_consistent(layout)

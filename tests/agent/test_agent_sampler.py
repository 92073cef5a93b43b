"""The elastic sampler: every example exactly once per epoch, whatever the batch size and replica count do."""

import numpy as np
import pytest

from pollux.agent.sampler import epoch_order, plan_micro_batches, replica_slice


def consumed(num_examples, position, replicas, micro, accum):
    """Positions each replica trains on, over the plan from `position` to the end of the epoch."""
    seen = []
    for mb in plan_micro_batches(num_examples, position, replicas, micro, accum):
        sizes = []
        for rank in range(replicas):
            a, b = replica_slice(mb.start, mb.stop, replicas, rank)
            seen.extend(range(a, b))
            sizes.append(b - a)
        assert min(sizes) >= 1, "every replica trains on at least one example"
        assert max(sizes) - min(sizes) <= 1
    return seen


@pytest.mark.parametrize("seed", range(20))
def test_a_plan_covers_the_rest_of_the_epoch_exactly_once(seed):
    rng = np.random.default_rng(seed)
    replicas = int(rng.integers(1, 6))
    num_examples = int(rng.integers(replicas, 500))
    micro = int(rng.integers(replicas, 64))
    position = int(rng.integers(0, num_examples - replicas + 1))
    seen = consumed(num_examples, position, replicas, micro, int(rng.integers(0, 4)))
    assert sorted(seen) == list(range(position, num_examples))


def test_steps_group_accum_plus_one_micro_batches_and_the_epoch_ends_a_step():
    plan = plan_micro_batches(100, 0, 2, 10, accum_steps=2)
    assert [mb.micro_index for mb in plan] == [0, 1, 2] * 3 + [0]
    assert [mb.ends_step for mb in plan] == [False, False, True] * 3 + [True]
    assert all(mb.full for mb in plan)


def test_a_tail_smaller_than_the_replica_count_joins_the_previous_micro_batch():
    plan = plan_micro_batches(22, 0, 3, 10, accum_steps=0)
    assert [(mb.start, mb.stop, mb.full) for mb in plan] == [(0, 10, True), (10, 22, False)]


@pytest.mark.parametrize("seed", range(10))
def test_changing_batch_size_and_replicas_between_steps_never_skips_or_repeats(seed):
    rng = np.random.default_rng(seed)
    num_examples, position, seen = 1000, 0, []
    while position < num_examples:
        replicas = int(rng.integers(1, 5))
        if num_examples - position < replicas:
            break
        micro, accum = int(rng.integers(replicas, 40)), int(rng.integers(0, 3))
        steps = int(rng.integers(1, 4))  # train a few steps at this configuration, then "re-plan"
        for mb in plan_micro_batches(num_examples, position, replicas, micro, accum):
            for rank in range(replicas):
                a, b = replica_slice(mb.start, mb.stop, replicas, rank)
                seen.extend(range(a, b))
            if mb.ends_step:
                position = mb.stop
                steps -= 1
                if steps == 0:
                    break
    assert sorted(seen) == list(range(position))
    assert num_examples - position < 5


def test_epoch_order_is_a_permutation_fixed_by_seed_and_epoch():
    a = epoch_order(100, epoch=3, seed=1, shuffle=True)
    assert sorted(a.tolist()) == list(range(100))
    assert np.array_equal(a, epoch_order(100, epoch=3, seed=1, shuffle=True))
    assert not np.array_equal(a, epoch_order(100, epoch=4, seed=1, shuffle=True))
    assert np.array_equal(epoch_order(5, 0, 0, shuffle=False), np.arange(5))

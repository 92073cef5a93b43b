"""A crashed Ray worker group's code: a lost node is not the job's crash, and Ray gets a bounded time to say so."""

from __future__ import annotations

from pollux.runtime.launcher import EXIT_NODE_LOST
from pollux.runtime.ray_group import VERDICT_WAIT_S, crash_verdict


def test_a_crash_on_a_node_ray_declares_dead_is_a_lost_node_whatever_the_workers_said() -> None:
    assert crash_verdict(1, ["n2"], unreachable=False, crashed_for_s=0.0) == EXIT_NODE_LOST
    assert crash_verdict(137, ["n2"], unreachable=True, crashed_for_s=VERDICT_WAIT_S * 2) == EXIT_NODE_LOST


def test_a_crash_with_an_unreachable_actor_waits_for_rays_word_then_counts_as_the_crash() -> None:
    assert crash_verdict(1, [], unreachable=True, crashed_for_s=0.0) is None  # still "running"
    assert crash_verdict(1, [], unreachable=True, crashed_for_s=VERDICT_WAIT_S - 0.1) is None
    assert crash_verdict(1, [], unreachable=True, crashed_for_s=VERDICT_WAIT_S) == 1


def test_a_crash_with_every_actor_answering_is_the_jobs_crash_at_once() -> None:
    assert crash_verdict(3, [], unreachable=False, crashed_for_s=0.0) == 3

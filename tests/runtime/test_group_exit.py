"""One group's exit code from its workers' codes, the same for both launchers: the first crash wins."""

from __future__ import annotations

import itertools

from pollux.runtime.launcher import EXIT_STOPPED
from pollux.runtime.processes import GroupExit


def test_the_group_runs_until_every_worker_has_exited() -> None:
    group = GroupExit.of(3)
    for rank in range(2):
        assert not group.record(rank, 0)
        assert group.running() and group.settle() is None
    group.record(2, 0)
    assert group.settle() == 0


def test_the_first_crash_is_the_groups_code_whatever_the_killed_siblings_report() -> None:
    group = GroupExit.of(3)
    assert group.record(1, 3)  # the first crash: the launcher must kill the others
    assert not group.record(0, 137) and not group.record(2, 9)  # killed siblings, later crashes
    assert group.settle() == 3


def test_every_order_of_the_same_codes_gives_a_code_of_the_same_kind() -> None:
    for codes in itertools.product((0, EXIT_STOPPED, 3), repeat=3):
        group = GroupExit.of(3)
        for rank, code in enumerate(codes):
            group.record(rank, code)
        crashes = [c for c in codes if c not in (0, EXIT_STOPPED)]
        expected = crashes[0] if crashes else (EXIT_STOPPED if EXIT_STOPPED in codes else 0)
        assert group.settle() == expected, codes

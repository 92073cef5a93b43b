"""Random-generator state survives a checkpoint, and a rank the saved job did not have is seeded reproducibly."""

import io
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
from pollux.agent.rng import capture_rng, restore_rng  # noqa: E402


def draws():
    return random.random(), float(np.random.rand()), float(torch.rand(()))  # noqa: NPY002


def through_checkpoint(states):
    buffer = io.BytesIO()
    torch.save(states, buffer)
    return torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)


def test_restored_generators_repeat_the_same_draws():
    saved = through_checkpoint([capture_rng()])
    first = draws()
    restore_rng(saved, rank=0)
    assert draws() == first


def test_new_ranks_get_distinct_reproducible_seeds():
    saved = through_checkpoint([capture_rng()])
    restore_rng(saved, rank=3)
    rank3 = draws()
    restore_rng(saved, rank=4)
    rank4 = draws()
    restore_rng(saved, rank=3)
    assert draws() == rank3 != rank4

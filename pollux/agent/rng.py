"""Random-generator state of one process, saved in checkpoints so a resumed job draws what it would have drawn.

Python's, NumPy's legacy global and torch's CPU generator, per rank. A restarted job with more ranks than the saved
one seeds the new ranks from rank 0's saved state and their rank, so runs stay reproducible.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

import numpy as np
import torch


def capture_rng() -> dict[str, Any]:
    """This process's random generators, in types a weights-only `torch.load` accepts. NumPy's legacy global
    generator is the user's (augmentation code draws from it), so it is saved as it is."""
    name, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002
    return {
        "python": random.getstate(),
        "numpy": [name, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }


def restore_rng(states: list[dict[str, Any]], rank: int) -> None:
    """Rank r takes the state rank r saved; a rank the saved job did not have gets a seed derived from rank 0's."""
    if rank < len(states):
        state = states[rank]
        random.setstate(_as_tuple(state["python"]))
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))  # noqa: NPY002
        torch.set_rng_state(state["torch"])
        return
    seed = (zlib.crc32(states[0]["torch"].numpy().tobytes()) + rank) % 2**32
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002
    torch.manual_seed(seed)


def _as_tuple(value: Any) -> Any:
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list | tuple) else value

"""Fixtures of the runtime tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_jobs import COUNTER_JOB


@pytest.fixture()
def counter_job(tmp_path: Path) -> Path:
    """The counter job script, in a folder of its own (specs point their command at it)."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    script = folder / "counter.py"
    script.write_text(COUNTER_JOB)
    return script

"""scripts/gpu_check.sh on a machine without a GPU: one line that says so, exit 0 (CI runs it anywhere)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU machine runs the whole check instead")
def test_without_a_gpu_the_check_says_so_in_one_line_and_exits_0():
    done = subprocess.run(
        ["bash", str(SCRIPT)], env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [done.stdout.strip()]
    assert done.stdout.startswith("gpu_check: no GPU here") and done.stderr == ""

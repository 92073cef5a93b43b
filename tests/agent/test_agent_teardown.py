"""After `agent.close()` nothing of the agent keeps the model alive: dropping the script's references frees the DDP
model and its process group at once, while Python runs, not in the interpreter's final teardown (where gloo's
pending work aborts the process: "terminate called without an active exception", exit 134)."""

from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
import pollux.agent as pa  # noqa: E402


def test_a_closed_agents_model_is_freed_by_reference_counting_alone(tmp_path) -> None:
    agent = pa.init_process_group("gloo", checkpoint_dir=tmp_path / "ckpt")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    ddp = pa.AdaptiveDataParallel(model, optimizer, scheduler)
    data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = pa.AdaptiveDataLoader(data, batch_size=8)
    for _ in pa.remaining_epochs_until(2):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            optimizer.step()
        scheduler.step()
    agent.close()
    freed = weakref.ref(ddp)
    gc.disable()  # only reference counting may free it, as when a script's main() returns
    try:
        del ddp, optimizer, scheduler, loader, agent, model
        assert freed() is None
    finally:
        gc.enable()


def test_exit_process_leaves_with_the_status_and_everything_printed(tmp_path):
    """A training script's last call: its status is the process's, and nothing it printed or logged is lost."""
    import subprocess
    import sys

    script = (
        "import logging, sys\n"
        "import pollux.agent as pa\n"
        "logging.basicConfig(stream=sys.stderr, level=logging.INFO)\n"
        "print('trained', end='')\n"
        "logging.getLogger('job').info('saved')\n"
        "pa.exit_process(7)\n"
        "print('never')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 7
    assert done.stdout == "trained" and "saved" in done.stderr

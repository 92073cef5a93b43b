"""The Pollux job agent for PyTorch (Pollux §3, §4.1): the only part of Pollux that imports torch.

A few changed lines turn an ordinary DDP script into a job that measures its own goodput, picks its batch size,
scales its learning rate, survives being restarted on a different number of workers, and reports to the scheduler::

    import pollux.agent as pa

    pa.init_process_group("gloo")  # torchrun's environment; one process without it
    model = pa.AdaptiveDataParallel(model, optimizer, lr_scheduler, scaling_rule=pa.AdaScale())
    loader = pa.AdaptiveDataLoader(dataset, batch_size=64, shuffle=True)  # batch_size = M0
    loader.autoscale_batch_size(max_batch_size=1024, local_bsz_bounds=(16, 256), gradient_accumulation=True)
    for epoch in pa.remaining_epochs_until(30):
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()

One process holds one agent (the object `init_process_group` returns), one AdaptiveDataParallel and one training
AdaptiveDataLoader (the first created); iterate epochs with `remaining_epochs_until` so a restart resumes them.
Schedule the LR by epoch or by `model.progress` (M0-steps), not by step count: steps change size.

Environment: `POLLUX_CHECKPOINT_DIR` (checkpoints; SIGTERM → finish the step, save, exit 143; with several
replicas the stop waits for their next agreement: about 0.2 s of training, or one step where steps are longer),
`POLLUX_REPORT_PATH` (the JSON report the scheduler reads; schema in docs/agent-report-schema.md),
`POLLUX_JOB_NAME`, `POLLUX_NUM_NODES` (override the host count), `POLLUX_METRICS_PATH` (where
`report_metric(accuracy=..., step=epoch)` appends the script's own metrics for `pollux tune`: `pollux.agent.metrics`).

Names resolve lazily, so `import pollux.agent.report` (the scheduler's side) never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "AdaptiveDataLoader": "pollux.agent.data",
    "AdaptiveDataParallel": "pollux.agent.parallel",
    "AgentContext": "pollux.agent.context",
    "current_agent": "pollux.agent.context",
    "exit_process": "pollux.agent.context",
    "init_process_group": "pollux.agent.context",
    "remaining_epochs_until": "pollux.agent.context",
    "ScalingRule": "pollux.agent.scaling",
    "AdaScale": "pollux.agent.scaling",
    "LinearScale": "pollux.agent.scaling",
    "NoScale": "pollux.agent.scaling",
    "SqrtScale": "pollux.agent.scaling",
    "report_metric": "pollux.agent.metrics",
    "JobReport": "pollux.agent.report",
    "read_report": "pollux.agent.report",
    "write_report": "pollux.agent.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pollux.agent' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))

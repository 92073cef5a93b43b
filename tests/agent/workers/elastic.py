"""Test worker: deterministic SGD-with-momentum regression that can be stopped (SIGTERM) and restarted elastically.

The total batch is fixed at 12 examples a step (divisible by 1, 2 and 3 replicas) and the data order is the
elastic sampler's, so the updates are the same math whatever the replica count: an interrupted-and-resized run must
end with the parameters of an uninterrupted one. Every example a replica trains on is logged as "epoch index".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import torch

import pollux.agent as pa

EXAMPLES = 240
BATCH_SIZE = 12


class IndexedRegression(torch.utils.data.Dataset):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(123)
        self.x = torch.randn(EXAMPLES, 8, generator=g)
        w = torch.randn(8, 1, generator=g)
        self.y = self.x @ w + 0.1 * torch.randn(EXAMPLES, 1, generator=g)

    def __len__(self) -> int:
        return EXAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[i], self.y[i], i


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="seconds per step, to give SIGTERM a target")
    parser.add_argument(
        "--hold-at-step",
        type=int,
        default=None,
        help="after this many steps, wait (at most 120 s) for SIGTERM before the next step: the test's stop then "
        "lands mid-training however loaded the machine is",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    torch.set_num_threads(1)
    workdir = Path(args.workdir)

    agent = pa.init_process_group("gloo")
    if agent.rank == 0 and agent.restored_from is not None:
        with open(workdir / "restores.jsonl", "a") as restores:
            restores.write(json.dumps({"steps": agent.steps, "saved_at_s": agent.restored_saved_at_s}) + "\n")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=7, gamma=0.8)
    ddp = pa.AdaptiveDataParallel(model, optimizer, scheduler)
    loader = pa.AdaptiveDataLoader(IndexedRegression(), batch_size=BATCH_SIZE, shuffle=True, seed=7)

    seen = open(workdir / f"indices-{os.getpid()}.txt", "a")  # noqa: SIM115
    for epoch in pa.remaining_epochs_until(args.epochs):
        for x, y, index in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            seen.write("".join(f"{epoch} {i}\n" for i in index.tolist()))
            seen.flush()
            if agent.rank == 0:
                # written whole then renamed: the tests poll this file and must never read it half-written
                (workdir / "progress.tmp").write_text(str(agent.steps))
                os.replace(workdir / "progress.tmp", workdir / "progress.txt")
            if args.hold_at_step is not None and agent.steps >= args.hold_at_step:
                deadline = time.monotonic() + 120
                while not agent.stop_requested_locally and time.monotonic() < deadline:
                    time.sleep(0.01)
            time.sleep(args.step_sleep)

    if agent.rank == 0:
        momentum = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
        torch.save({"params": [p.detach() for p in model.parameters()], "momentum": momentum}, workdir / "final.pt")
        info = {"steps": agent.steps, "restarts": agent.restarts, "configs": len(agent.throughput_log)}
        (workdir / "final.json").write_text(json.dumps(info))
    seen.close()
    agent.close()


if __name__ == "__main__":
    main()
    pa.exit_process()  # no teardown after training: see its docstring

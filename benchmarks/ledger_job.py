"""A training job that proves it trained every example of every epoch exactly once, however often it was killed.

    python benchmarks/ledger_job.py --out DIR --epochs 100      # under `pollux up`, or torchrun, or alone

A small MLP on 240 indexed random examples, a fixed total batch of 24, driven by the Pollux agent. Its *ledger*, a
buffer of the model (so it lives in every checkpoint), counts per (epoch, example) how often the example was
trained in a step the job kept: after every micro-batch the replicas all-reduce which indices they saw. Work done
after the last checkpoint and lost to a crash is lost from the ledger too, so at the end every count must be 1.

Traces, written by rank 0 into `--out`:
    progress      examples trained so far, the time, and the incarnation (its rendezvous port), rewritten after
                  every step: its last value is how far an incarnation got before it died
    starts.jsonl  one line per incarnation: where it resumed (examples, checkpoint time) and where the previous
                  one had got to
    pid-<rank>    each rank's pid and incarnation (to kill one of the running group)
    final.json    at the end: the ledger's min and max count, epochs, restarts
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

import pollux.agent as pa

EXAMPLES = 240
BATCH_SIZE = 24


class Indexed(torch.utils.data.Dataset):
    """Random regression examples that also return their index."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(5)
        self.x = torch.randn(EXAMPLES, 16, generator=g)
        self.y = self.x @ torch.randn(16, 1, generator=g)

    def __len__(self) -> int:
        return EXAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[i], self.y[i], i


class LedgerModel(torch.nn.Module):
    def __init__(self, epochs: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.register_buffer("ledger", torch.zeros(epochs, EXAMPLES, dtype=torch.int32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--step-s", type=float, default=0.01, help="sleep per step: how long a step takes")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    agent = pa.init_process_group("gloo")
    incarnation = os.environ.get("MASTER_PORT", "0")  # a launch's own rendezvous port
    write_atomic(out / f"pid-{agent.rank}", f"{os.getpid()} {incarnation}")
    torch.manual_seed(0)
    model = LedgerModel(args.epochs)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    ddp = pa.AdaptiveDataParallel(model, optimizer, broadcast_buffers=False)
    loader = pa.AdaptiveDataLoader(Indexed(), batch_size=BATCH_SIZE, shuffle=True)
    progress = out / "progress"
    if agent.rank == 0:
        previous = progress.read_text().split() if progress.exists() else ["0", "0"]
        start = {
            "at_s": time.time(),
            "incarnation": incarnation,
            "world_size": agent.world_size,
            "examples": agent.examples,
            "checkpoint_saved_at_s": agent.restored_saved_at_s,
            "previous_examples": int(previous[0]),
            "previous_step_at_s": float(previous[1]),
        }
        with open(out / "starts.jsonl", "a") as starts:
            starts.write(json.dumps(start) + "\n")

    for epoch in pa.remaining_epochs_until(args.epochs):
        for x, y, index in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            optimizer.step()
            seen = torch.zeros(EXAMPLES, dtype=torch.int32).index_add_(
                0, index, torch.ones_like(index, dtype=torch.int32)
            )
            if agent.distributed:
                dist.all_reduce(seen)
            model.ledger[epoch] += seen
            if agent.rank == 0:
                write_atomic(progress, f"{agent.examples} {time.time()} {incarnation}")
            time.sleep(args.step_s)

    if agent.rank == 0:
        ledger = model.ledger
        final = {
            "ledger_min": int(ledger.min()),
            "ledger_max": int(ledger.max()),
            "epochs": agent.epoch,
            "examples": agent.examples,
            "restarts": agent.restarts,
        }
        write_atomic(out / "final.json", json.dumps(final))
    agent.close()


if __name__ == "__main__":
    main()
    pa.exit_process()  # no teardown after training: see its docstring

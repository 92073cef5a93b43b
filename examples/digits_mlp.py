"""An MLP on scikit-learn's bundled digits, trained by the Pollux agent (no downloads).

    .venv/bin/python examples/digits_mlp.py --epochs 20
    .venv/bin/torchrun --nproc_per_node=2 examples/digits_mlp.py --checkpoint-dir /tmp/digits/ckpt \\
        --report-path /tmp/digits/report.json

SGD with momentum and AdaScale: the agent measures the gradient noise scale, picks the batch size (M0 = 32, or
--batch-size, up to 512, accumulating beyond 128 per process) and scales the learning rate (--lr at M0) to match.
Stop it with SIGTERM (or Ctrl-C for no checkpoint) and start it again with any number of processes: it continues
where it stopped. Each epoch it reports its test accuracy (`pa.report_metric`), which `pollux tune` optimizes:
examples/digits_hpo.toml tunes --lr and --batch-size.
"""

from __future__ import annotations

import argparse
import logging
import os

import torch
from sklearn.datasets import load_digits

import pollux.agent as pa


def digits() -> tuple[torch.utils.data.TensorDataset, torch.utils.data.TensorDataset]:
    """1,797 8×8 images in 10 classes: a fixed 1,500 / 297 train / test split."""
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, test = order[:1500], order[1500:]
    return torch.utils.data.TensorDataset(x[train], y[train]), torch.utils.data.TensorDataset(x[test], y[test])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("POLLUX_CHECKPOINT_DIR"))
    parser.add_argument("--report-path", default=os.environ.get("POLLUX_REPORT_PATH"))
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="cuda: this process's GPU (LOCAL_RANK); the default where torch sees one",
    )
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate at the initial batch size")
    parser.add_argument("--batch-size", type=int, default=32, help="initial (total) batch size M0")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)

    agent = pa.init_process_group("gloo", checkpoint_dir=args.checkpoint_dir, report_path=args.report_path)
    train, test = digits()
    device = torch.device("cuda", agent.local_rank) if args.device == "cuda" else torch.device("cpu")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=max(args.epochs // 3, 1), gamma=0.3)
    ddp = pa.AdaptiveDataParallel(
        model,
        optimizer,
        scheduler,
        scaling_rule=pa.AdaScale(),
        device_ids=None if device.type == "cpu" else [device.index],
    )
    loader = pa.AdaptiveDataLoader(train, batch_size=args.batch_size, shuffle=True)
    loader.autoscale_batch_size(max_batch_size=512, local_bsz_bounds=(8, 128), gradient_accumulation=True)

    for epoch in pa.remaining_epochs_until(args.epochs):
        ddp.train()
        total, count = 0.0, 0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
            optimizer.step()
            total, count = total + loss.item() * len(x), count + len(x)
        scheduler.step()
        if agent.rank == 0:
            with torch.no_grad():
                x, y = (t.to(device) for t in test.tensors)
                accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
            pa.report_metric(accuracy=accuracy, step=epoch)
            phi = ddp.noise_scale
            print(
                f"epoch {epoch:3d}  loss {total / max(count, 1):.4f}  test accuracy {accuracy:.3f}  "
                f"batch {loader.current_batch_size:4d} (local {loader.current_local_bsz}, accum {loader.accum_steps})  "
                f"noise scale {'-' if phi is None else f'{phi:.0f}'}  lr x{ddp.current_lr_factor:.2f}",
                flush=True,
            )
    agent.close()


if __name__ == "__main__":
    main()
    pa.exit_process()  # no teardown after training: see its docstring

"""A small CNN on synthetic CIFAR-like images (3×32×32, 10 classes), trained by the Pollux agent (no downloads).

    .venv/bin/python examples/cifar_like_cnn.py --epochs 5
    .venv/bin/torchrun --nproc_per_node=2 examples/cifar_like_cnn.py --checkpoint-dir /tmp/cnn/ckpt \\
        --report-path /tmp/cnn/report.json

Each class is a fixed random smooth pattern; an image is a faint copy of its class pattern under pixel noise, so
the task is learnable but not trivial, and the gradient is noisy. Adam with square-root LR scaling: the noise
scale is measured in Adam's preconditioned space. Stop with SIGTERM and restart with any number of processes to
continue.
"""

from __future__ import annotations

import argparse
import logging
import os

import torch

import pollux.agent as pa

CLASSES = 10


def synthetic_images(examples: int, seed: int, signal: float = 0.1) -> torch.utils.data.TensorDataset:
    """Faint class patterns (smooth, from a fixed seed) under unit Gaussian pixel noise (from `seed`)."""
    patterns = torch.randn(CLASSES, 3, 8, 8, generator=torch.Generator().manual_seed(1234))
    patterns = torch.nn.functional.interpolate(patterns, size=(32, 32), mode="bilinear", align_corners=False)
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (examples,), generator=g)
    images = signal * patterns[labels] + torch.randn(examples, 3, 32, 32, generator=g)
    return torch.utils.data.TensorDataset(images, labels)


def small_cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 8 * 8, CLASSES),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--examples", type=int, default=5000, help="training images")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("POLLUX_CHECKPOINT_DIR"))
    parser.add_argument("--report-path", default=os.environ.get("POLLUX_REPORT_PATH"))
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="cuda: this process's GPU (LOCAL_RANK); the default where torch sees one",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)

    agent = pa.init_process_group("gloo", checkpoint_dir=args.checkpoint_dir, report_path=args.report_path)
    train, test = synthetic_images(args.examples, seed=0), synthetic_images(1000, seed=1)
    device = torch.device("cuda", agent.local_rank) if args.device == "cuda" else torch.device("cpu")
    torch.manual_seed(0)
    model = small_cnn().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    ddp = pa.AdaptiveDataParallel(
        model, optimizer, scaling_rule=pa.SqrtScale(), device_ids=None if device.type == "cpu" else [device.index]
    )
    loader = pa.AdaptiveDataLoader(train, batch_size=64, shuffle=True)
    loader.autoscale_batch_size(max_batch_size=1024, local_bsz_bounds=(16, 128), gradient_accumulation=True)

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
        if agent.rank == 0:
            model.eval()
            with torch.no_grad():
                x, y = (t.to(device) for t in test.tensors)
                accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
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

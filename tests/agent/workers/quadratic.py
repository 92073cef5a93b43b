"""Test worker: a quadratic whose per-example gradient is the true gradient plus noise of known covariance.

Per-example loss l_i(θ) = ½|θ|² − ξ_i·θ, so ∇l_i = θ − ξ_i. The ξ_i are centred exactly, so the true gradient is
θ and tr(Σ) is the ξ's total variance: the noise scale is φ = tr(Σ)/|θ|² (preconditioned for Adam: the same with
every coordinate divided by the optimizer's denominator). With lr = 0 θ stays put, so φ is a constant.

Run under a torchrun-like environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or alone; writes a JSON result.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import numpy as np
import torch

import pollux.agent as pa


class Quadratic(torch.nn.Module):
    def __init__(self, theta: np.ndarray) -> None:
        super().__init__()
        self.theta = torch.nn.Parameter(torch.tensor(theta, dtype=torch.float32))

    def forward(self, xi: torch.Tensor) -> torch.Tensor:
        return (0.5 * self.theta.pow(2).sum() - xi @ self.theta).mean()


def make_problem(dim: int, examples: int, trace: float, anisotropic: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(ξ of shape (examples, dim), centred, with Σ_i |ξ_i|²/N = trace; θ with |θ|² = 1)."""
    rng = np.random.default_rng(seed)
    scales = np.geomspace(0.1, 1.0, dim) if anisotropic else np.ones(dim)
    xi = rng.standard_normal((examples, dim)) * scales
    xi -= xi.mean(axis=0)
    xi *= np.sqrt(trace / (xi**2).sum(axis=1).mean())
    theta = rng.standard_normal(dim) * (scales[::-1] if anisotropic else 1.0)
    theta /= np.linalg.norm(theta)
    return xi.astype(np.float32), theta


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--dim", type=int, default=1000)
    parser.add_argument("--examples", type=int, default=4096)
    parser.add_argument("--trace", type=float, default=64.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--anisotropic", action="store_true")
    parser.add_argument("--max-batch-size", type=int, default=0, help="0: fixed batch size")
    parser.add_argument("--local-bsz-bounds", type=int, nargs=2, default=(8, 256))
    parser.add_argument("--accumulation", action="store_true")
    parser.add_argument("--fixed-accum", type=int, default=0, help="force this many accumulation steps")
    parser.add_argument("--adapt-interval", type=int, default=10)
    parser.add_argument("--seconds-per-example", type=float, default=0.0, help="emulated compute cost")
    parser.add_argument("--smoothing", type=float, default=0.999)
    args = parser.parse_args()

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    torch.set_num_threads(1)
    agent = pa.init_process_group("gloo")
    xi, theta = make_problem(args.dim, args.examples, args.trace, args.anisotropic, seed=0)
    model = Quadratic(theta)
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=0.0)
    ddp = pa.AdaptiveDataParallel(model, optimizer, gns_smoothing=args.smoothing)
    loader = pa.AdaptiveDataLoader(torch.utils.data.TensorDataset(torch.from_numpy(xi)), args.batch_size, shuffle=True)
    if args.max_batch_size:
        loader.autoscale_batch_size(
            args.max_batch_size,
            tuple(args.local_bsz_bounds),
            args.accumulation,
            adapt_interval_steps=args.adapt_interval,
            refit_interval_s=0.0,
        )
    elif args.fixed_accum:  # total batch M0 in (fixed_accum + 1) micro-batches per replica
        local = args.batch_size // (agent.world_size * (args.fixed_accum + 1))
        loader.autoscale_batch_size(args.batch_size, (local, local), True)

    batches: list[int] = []
    windows: list[int] = []  # the statistics exchange's window length in steps after every step
    for _ in pa.remaining_epochs_until(args.epochs):
        for (x,) in loader:
            optimizer.zero_grad()
            if args.seconds_per_example:  # a model whose forward + backward cost grows with the batch
                time.sleep(args.seconds_per_example * len(x))
            ddp(x).backward()
            optimizer.step()
            batches.append(loader.current_batch_size)
            windows.append(ddp._exchange.interval_steps)

    stats = ddp.grad_stats
    denom = None
    if args.optimizer == "adam":
        state = optimizer.state[model.theta]
        denom = ((state["exp_avg_sq"] / (1 - 0.999 ** float(state["step"]))).sqrt() + 1e-8).numpy()
    sigma2 = (xi.astype(np.float64) ** 2).mean(axis=0)
    weights = np.ones_like(sigma2) if denom is None else 1.0 / denom.astype(np.float64) ** 2
    analytic = float((sigma2 * weights).sum() / ((theta**2) * weights).sum())
    with open(f"{args.out}.windows.rank{agent.rank}", "w") as f:
        json.dump(windows, f)
    if agent.rank == 0:
        with open(args.out, "w") as f:
            json.dump(
                {
                    "noise_scale": ddp.noise_scale,
                    "analytic_noise_scale": analytic,
                    "sqr": stats.sqr,
                    "var": stats.var,
                    "batch_sizes": batches,
                    "throughput_configs": len(agent.throughput_log),
                    "steps": agent.steps,
                    "final_local_bsz": loader.current_local_bsz,
                    "final_accum_steps": loader.accum_steps,
                },
                f,
            )
    agent.close()


if __name__ == "__main__":
    main()
    pa.exit_process()  # no teardown after training: see its docstring

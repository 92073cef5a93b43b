"""One policy factory: a command-line setting reaches the policy in the simulator and the runtime alike, and the
engine holds every policy to the placement rules it declares, in both."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from typer.testing import CliRunner

from pollux import sim
from pollux.cli import app
from pollux.cluster import Cluster
from pollux.errors import AllocationError
from pollux.policies.base import JobView, Policy, PolicyResult
from pollux.policies.pollux import PolluxPolicy
from pollux.policies.registry import POLICIES, PolicySettings, make_policy
from pollux.runtime.service import make_runtime_policy
from pollux.sim.run import SimConfig, simulate
from pollux.sim.workload import WorkloadJob


class Captured(Exception):
    """Raised by the patched simulator with the policy it was handed, so nothing is simulated."""


def test_simulate_restart_delay_reaches_the_pollux_policys_delta(tmp_path, monkeypatch) -> None:
    seen: list[Policy] = []

    def capture(rows, policy, models, config, on_round=None):
        seen.append(policy)
        raise Captured

    monkeypatch.setattr(sim.run, "simulate", capture)
    monkeypatch.setenv("POLLUX_DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setenv("POLLUX_CACHE_DIR", str(tmp_path / "cache"))
    args = ["simulate", "workload-1", "-p", "pollux", "--restart-delay", "120", "--processes", "1"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert isinstance(result.exception, Captured), result.output
    assert isinstance(seen[0], PolluxPolicy) and seen[0].restart_delay_s == 120.0


def test_the_runtime_gives_its_restart_delay_and_undiscounted_starts_through_the_same_factory() -> None:
    policy = make_runtime_policy("pollux", restart_delay_s=45.0)
    assert isinstance(policy, PolluxPolicy)
    assert (policy.restart_delay_s, policy.discount_starts, policy.avoids_sharing) == (45.0, False, True)


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_is_built_from_the_settings_it_declares_and_nothing_else(name: str) -> None:
    inputs = {"gittins_service_samples": lambda: [60.0, 600.0, 6000.0]}
    policy = make_policy(name, PolicySettings(restart_delay_s=77.0, p=0.5, avoid_interference=False), inputs)
    for field in type(policy).settings:
        assert getattr(policy, field) == getattr(PolicySettings(77.0, 0.5, False), field)
    assert policy.avoids_sharing is False  # only Pollux may avoid sharing, and it was told not to


class SharesNodes(Policy):
    """A policy that declares it never shares a node between distributed jobs, and then does."""

    name = "shares-nodes"

    @property
    def avoids_sharing(self) -> bool:
        return True

    def optimize(self, jobs: Sequence[JobView], cluster: Cluster, now: float) -> PolicyResult:
        names = [job.name for job in jobs]
        return PolicyResult({names[0]: (2, 2, 0), names[1]: (0, 2, 2)} if len(names) > 1 else {})


def test_the_simulator_rejects_two_distributed_jobs_on_one_node_when_the_policy_avoids_sharing() -> None:
    from pollux.sim.parametric import load_catalog

    models = load_catalog()
    app_name = next(iter(models))
    rows = [WorkloadJob(f"j{i}", 0, app_name, 4, models[app_name].init_batch_size) for i in range(2)]
    with pytest.raises(AllocationError, match="share"):
        simulate(rows, SharesNodes(), models, SimConfig(cluster=Cluster(3, 4)))

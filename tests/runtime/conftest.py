"""Fixtures of the runtime tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from runtime_jobs import COUNTER_JOB

if TYPE_CHECKING:
    from test_autoscale_ray import AutoscalingRay

AUTOSCALING_RAY = "autoscaling_ray"
_USERS = pytest.StashKey[set[str]]()


@pytest.fixture()
def counter_job(tmp_path: Path) -> Path:
    """The counter job script, in a folder of its own (specs point their command at it)."""
    folder = tmp_path / "jobs"
    folder.mkdir()
    script = folder / "counter.py"
    script.write_text(COUNTER_JOB)
    return script


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests on the autoscaling Ray cluster run one after another (from where the first of them was), so that
    one cluster serves them all and is stopped after the last, not left idle while other modules run."""
    users = [item for item in items if AUTOSCALING_RAY in getattr(item, "fixturenames", ())]
    if users:
        first = items.index(users[0])
        others = [item for item in items if item not in users]
        items[:] = others[:first] + users + others[first:]
    config.stash[_USERS] = {item.nodeid for item in users}


class _SharedAutoscalingRay:
    """One autoscaling Ray cluster (`test_autoscale_ray.AutoscalingRay`) for every test that asks for it: started
    for the first, started afresh after a test that spoiled it (killed one of its nodes: Ray's fake provider never
    replaces a dead node), stopped after the last."""

    def __init__(self) -> None:
        self.cluster: AutoscalingRay | None = None

    def get(self) -> AutoscalingRay:
        import ray
        from test_autoscale_ray import AutoscalingRay

        if self.cluster is not None and self.cluster.spoiled:
            self.close()
        if self.cluster is None:
            if ray.is_initialized():
                pytest.skip("Ray is already initialised in this process")
            self.cluster = AutoscalingRay()
            try:
                self.cluster.connect()
            except BaseException:
                self.close()
                raise
        self.cluster.started = time.monotonic()  # each test prints the nodes of its own time
        return self.cluster

    def close(self) -> None:
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.shutdown()


@pytest.fixture(scope="session")
def _autoscaling_ray_shared() -> Iterator[_SharedAutoscalingRay]:
    shared = _SharedAutoscalingRay()
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture()
def autoscaling_ray(
    request: pytest.FixtureRequest, _autoscaling_ray_shared: _SharedAutoscalingRay
) -> Iterator[AutoscalingRay]:
    """A real local autoscaling Ray cluster of fake nodes, with no GPU node running at the start of the test (one
    that an earlier test's Pollux left Ray to stop is waited for); stopped after the last test that uses it."""
    from runtime_jobs import wait_for

    cluster = _autoscaling_ray_shared.get()
    wait_for(lambda: cluster.nodes() == {}, 60, "Ray to stop the GPU nodes of the previous test")
    cluster.samples.clear()
    try:
        yield cluster
    finally:
        users = request.config.stash[_USERS]
        users.discard(request.node.nodeid)
        if not users:
            _autoscaling_ray_shared.close()

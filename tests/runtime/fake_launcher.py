"""A launcher without processes, for fast tests of the service's logic (the real launchers have their own tests).

Each launched group is a record the test drives: `exit(job, code)` ends it as if its workers exited with `code`;
`stop` ends it with 143 at the next poll, as the agent does after a checkpoint, unless the job `ignores_stop`
(then only `kill` ends it, with 137). `refuse(job, transient)` makes its next launch fail.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from pollux.cluster import Cluster
from pollux.errors import LaunchError, UnknownJobError
from pollux.runtime.launcher import EXIT_STOPPED, LaunchRequest, WorkerInfo
from pollux.runtime.processes import GroupExit


@dataclass
class FakeGroup:
    request: LaunchRequest
    workers: list[WorkerInfo]
    exit: GroupExit
    pending_code: int | None = None  # what the next poll reports for every worker still running


@dataclass
class FakeLauncher:
    name: str = "fake"
    cluster: Cluster = field(default_factory=lambda: Cluster(num_nodes=1, gpus_per_node=4))
    groups: dict[str, FakeGroup] = field(default_factory=dict)
    launches: list[LaunchRequest] = field(default_factory=list)
    ignores_stop: set[str] = field(default_factory=set)
    refusals: dict[str, bool] = field(default_factory=dict)  # job -> transient
    reaped: list[WorkerInfo] = field(default_factory=list)
    _pids: itertools.count = field(default_factory=lambda: itertools.count(1000))

    def launch(self, request: LaunchRequest) -> list[WorkerInfo]:
        if request.job in self.refusals:
            raise LaunchError(f"job {request.job}: refused by the test", transient=self.refusals.pop(request.job))
        old = self.groups.get(request.job)
        if old is not None and old.exit.running():
            raise LaunchError(f"job {request.job}: still running", transient=True)
        used = sum(sum(g.request.allocation) for j, g in self.groups.items() if j != request.job and g.exit.running())
        if used + sum(request.allocation) > self.cluster.num_gpus:
            raise LaunchError(f"job {request.job}: not enough free GPUs", transient=True)
        n = sum(request.allocation)
        workers = [WorkerInfo(rank=r, node=0, pid=next(self._pids), host="fake", start_ticks=1) for r in range(n)]
        self.groups[request.job] = FakeGroup(request, workers, GroupExit.of(n))
        self.launches.append(request)
        return list(workers)

    def exit(self, job: str, code: int) -> None:
        """The test's hand: the group's workers exit with `code` (seen at the next poll)."""
        self._group(job).pending_code = code

    def running(self, job: str) -> bool:
        group = self.groups.get(job)
        return group is not None and group.exit.running()

    def poll(self, job: str) -> int | None:
        group = self._group(job)
        if group.pending_code is not None and group.exit.running():
            for rank, code in enumerate(group.exit.codes):
                if code is None:
                    group.exit.record(rank, group.pending_code)
        return group.exit.settle()

    def stop(self, job: str) -> None:
        if job not in self.ignores_stop and self.running(job):
            self._group(job).pending_code = EXIT_STOPPED

    def kill(self, job: str) -> None:
        if self.running(job):
            self._group(job).pending_code = 137

    def forget(self, job: str) -> None:
        if self.running(job):
            raise RuntimeError(f"job {job}: cannot forget a running group")
        self.groups.pop(job, None)

    def reap(self, workers: list[WorkerInfo]) -> int:
        """A previous scheduler's workers get SIGTERM and exit 143, as the agent does after its checkpoint."""
        self.reaped.extend(workers)
        pids = {w.pid for w in workers}
        alive = [g for g in self.groups.values() if g.exit.running() and pids & {w.pid for w in g.workers}]
        for group in alive:
            group.pending_code = EXIT_STOPPED
        return sum(len(g.workers) for g in alive)

    def shutdown(self) -> None:
        pass

    def _group(self, job: str) -> FakeGroup:
        if job not in self.groups:
            raise UnknownJobError(f"job {job}: the fake launcher has no group for it")
        return self.groups[job]

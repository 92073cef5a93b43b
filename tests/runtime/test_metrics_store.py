"""The scripts' metrics in the service: read from a job's metrics file as it grows, stored once per line (a
restarted service reads the file again), removed with the job."""

from __future__ import annotations

from pollux.agent.metrics import MetricRecord
from pollux.runtime.config import ServiceConfig
from pollux.runtime.reports import ReportCache
from pollux.runtime.spec import JobSpec
from pollux.runtime.status import JobEvent
from pollux.runtime.store import StateStore


def line(step: int, accuracy: float) -> str:
    return MetricRecord(100.0 + step, step, {"accuracy": accuracy}).to_line()


def test_whole_lines_are_stored_once_each_across_a_restart_and_a_bad_line_keeps_its_place(tmp_path):
    config = ServiceConfig(state_dir=tmp_path)
    store = StateStore(config.database)
    store.add_job(JobSpec(name="t", command=("python", "-c", "pass"), init_batch_size=8), now=1.0)
    path = config.metrics_path("t")
    path.parent.mkdir(parents=True)
    path.write_text(line(0, 0.5) + "not json\n" + line(2, 0.7)[:10])  # the last line is still being written
    cache = ReportCache(config, store)
    cache.refresh("t", now=2.0)
    assert [(seq, r.step) for seq, r in store.metrics("t")] == [(0, 0)]
    with path.open("a") as handle:
        handle.write(line(2, 0.7)[10:] + line(3, 0.8))
    cache.refresh("t", now=3.0)
    ReportCache(config, store).refresh("t", now=4.0)  # a restarted service: the same lines, not stored twice
    assert [(seq, r.step, r.metrics["accuracy"]) for seq, r in store.metrics("t")] == [
        (0, 0, 0.5),
        (2, 2, 0.7),
        (3, 3, 0.8),
    ]
    assert [seq for seq, _ in store.metrics("t", after=2)] == [3]
    store.record_exit("t", JobEvent.LAUNCH_REFUSED, now=5.0, reason="test", error="x")
    store.remove_job("t", now=6.0)
    assert store.metrics("t") == []
    store.close()

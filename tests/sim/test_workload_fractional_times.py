"""Submission times with a fraction of a second, as real traces write them (`487.661836`), are read and simulated:
a job is considered by the first round at or after its submission, and its JCT counts from the submission itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from pollux.cluster import Cluster
from pollux.errors import TraceError
from pollux.policies.registry import make_policy
from pollux.sim.parametric import load_catalog
from pollux.sim.run import SimConfig, simulate
from pollux.sim.workload import Workload, WorkloadJob, read_workload, write_workload

HEADER = "name,time,application,num_replicas,batch_size\n"


def test_a_fractional_time_is_read_as_written_and_a_whole_one_stays_an_integer(tmp_path: Path):
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "a,487.661836,cifar10,1,128\nb,225.0,cifar10,1,128\nc,12,cifar10,1,128\n")
    times = {job.name: job.submit_time_s for job in read_workload(path).jobs}
    assert times == {"a": 487.661836, "b": 225, "c": 12}
    assert isinstance(times["b"], int) and isinstance(times["c"], int)


def test_a_fractional_time_survives_writing_and_reading_back(tmp_path: Path):
    jobs = (WorkloadJob("a", 487.661836, "cifar10", 1, 128), WorkloadJob("b", 3, "cifar10", 2, 256))
    path = write_workload(Workload("w", jobs), tmp_path / "w.csv")
    assert "a,487.661836,cifar10" in path.read_text() and "b,3,cifar10" in path.read_text()
    assert read_workload(path).jobs == (jobs[1], jobs[0])  # in submission order


@pytest.mark.parametrize("time", ["-0.5", "nan", "inf", "soon", ""])
def test_a_time_that_is_not_seconds_names_the_line_and_field(tmp_path: Path, time: str):
    path = tmp_path / "bad.csv"
    path.write_text(HEADER + f"a,1,cifar10,1,128\nb,{time},cifar10,1,128\n")
    with pytest.raises(TraceError, match=rf"{path}:3: field 'time': expected non-negative seconds"):
        read_workload(path)


def test_a_job_submitted_within_a_round_starts_at_the_next_and_counts_its_jct_from_its_submission():
    models = load_catalog()
    config = SimConfig(cluster=Cluster(1, 4), interval_s=60, restart_delay_s=30)
    whole, fraction = (
        simulate([WorkloadJob("job", time, "cifar10", 1, 128)], make_policy("fifo"), models, config).jobs[0]
        for time in (487, 487.661836)
    )
    assert whole.start_s == fraction.start_s == 540  # the first round after 487.66 s
    assert fraction.finish_s == whole.finish_s
    assert fraction.submit_s == 487.661836
    assert fraction.jct_s == pytest.approx(whole.jct_s - 0.661836)

"""The jobs' agent reports as the service knows them: read from each running job's report file when it changes,
kept in memory and in the store (for `pollux ls` and a restarted service), and what they say of goodput; and the
scripts' own metrics (`pollux.agent.metrics`), read from each job's metrics file as it grows into the store."""

from __future__ import annotations

import functools
import logging

from pollux.agent.metrics import MetricRecord, parse_metric_line
from pollux.agent.report import BatchInUse, JobReport, read_report
from pollux.errors import ReportError
from pollux.goodput import GoodputFunction, GradientStats, ThroughputParams
from pollux.runtime.config import ServiceConfig
from pollux.runtime.store import JobSample, StateStore

LOG = logging.getLogger("pollux.runtime")


def report_metrics(report: JobReport | None) -> tuple[float | None, float | None]:
    """(goodput, statistical efficiency) of a job at the batch and GPUs its agent last reported: the goodput of the
    best configuration on those GPUs (Pollux §3.3, what the agent itself picks) and the efficiency of the batch in
    use; None until the agent has fitted its model. One computation for `pollux ls`, the API and the dashboard,
    remembered per model, statistics and batch (every dashboard poll asks again for every job)."""
    if report is None or report.throughput_params is None or report.grad_stats is None:
        return None, None
    return _metrics(
        report.throughput_params,
        report.grad_stats,
        report.init_batch_size,
        report.batch,
        report.max_batch_size,
        report.local_bsz_bounds,
        report.gradient_accumulation,
    )


@functools.lru_cache(maxsize=4096)
def _metrics(
    params: ThroughputParams,
    stats: GradientStats,
    init_batch_size: int,
    batch: BatchInUse,
    max_batch_size: int,
    local_bsz_bounds: tuple[int, int],
    accumulation: bool,
) -> tuple[float | None, float | None]:
    if batch.num_replicas <= 0:
        return None, None
    fn = GoodputFunction(params, stats, init_batch_size)
    best = fn.optimize(batch.num_nodes, batch.num_replicas, max_batch_size, local_bsz_bounds, accumulation=accumulation)
    return float(best.goodput), float(fn.efficiency(batch.total_batch_size))


class ReportCache:
    """Each job's last report. Only the loop thread reads files and writes the store; any thread may ask."""

    def __init__(self, config: ServiceConfig, store: StateStore) -> None:
        self.config = config
        self.store = store
        self._mtimes: dict[str, float] = {}
        self._read: dict[str, JobReport] = {}  # read from its file by this process
        self._stored: dict[str, JobReport | None] = {}  # read from the store (written by an earlier process)
        self._metrics_read: dict[str, tuple[int, int]] = {}  # job -> (bytes of its metrics file read, lines in them)

    def refresh(self, name: str, now: float) -> None:
        """Take the job's report file into memory and the store when it changed since the last look, with one
        sample of its batch, goodput and efficiency for the dashboard's charts; and its new metrics lines."""
        self._refresh_metrics(name)
        path = self.config.report_path(name)
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return
        if mtime == self._mtimes.get(name):
            return
        self._mtimes[name] = mtime
        try:
            report = read_report(path)
        except ReportError as error:
            LOG.warning("job %s: ignoring its report: %s", name, error)
            return
        self._read[name] = report
        self.store.record_report(name, report.to_json_dict(), now)
        goodput, efficiency = report_metrics(report)
        batch = report.batch
        sample = JobSample(
            now, batch.num_replicas, batch.local_bsz, batch.accum_steps, batch.total_batch_size, goodput, efficiency
        )
        self.store.record_sample(name, sample)

    def _refresh_metrics(self, name: str) -> None:
        """Store the whole lines appended to the job's metrics file since the last look (the first look of this
        process reads it from the start: the store keeps a line it has already). A line that is not a metric
        record is logged and skipped, but keeps its position."""
        path = self.config.metrics_path(name)
        offset, seq = self._metrics_read.get(name, (0, 0))
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            return
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next look
        if not complete:
            return
        records: list[tuple[int, MetricRecord]] = []
        for line in complete.decode(errors="replace").splitlines():
            try:
                records.append((seq, parse_metric_line(line, f"{path}, line {seq + 1}")))
            except ReportError as error:
                LOG.warning("job %s: ignoring a metrics line: %s", name, error)
            seq += 1
        self.store.record_metrics(name, records)
        self._metrics_read[name] = (offset + len(complete), seq)

    def forget(self, name: str) -> None:
        """Drop a removed job's report: a new job may take its name."""
        self._metrics_read.pop(name, None)
        self._mtimes.pop(name, None)
        self._read.pop(name, None)
        self._stored.pop(name, None)

    def report(self, name: str) -> JobReport | None:
        """The job's last report: in memory, or from the store after a restart (read once: only this process's loop
        stores reports, and a report it reads takes the place of the stored one)."""
        if name in self._read:
            return self._read[name]
        if name not in self._stored:
            self._stored[name] = self.store.report_of(name)
        return self._stored[name]

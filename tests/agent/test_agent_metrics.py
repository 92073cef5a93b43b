"""`report_metric`: one line per call on rank 0, nothing elsewhere or outside a Pollux job, bad values refused."""

from __future__ import annotations

import pytest

from pollux.agent import environment
from pollux.agent.metrics import parse_metric_line, report_metric
from pollux.errors import AgentError, ReportError


def test_rank_zero_appends_one_line_per_call_that_the_service_reads_back(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    monkeypatch.setenv(environment.METRICS_PATH, str(path))
    monkeypatch.setenv("RANK", "0")
    report_metric(accuracy=0.5, step=1)
    report_metric(accuracy=0.75, loss=1, step=2)
    lines = path.read_text().splitlines()
    records = [parse_metric_line(line, "m") for line in lines]
    assert [(r.step, r.metrics) for r in records] == [(1, {"accuracy": 0.5}), (2, {"accuracy": 0.75, "loss": 1.0})]
    monkeypatch.setenv("RANK", "1")
    report_metric(accuracy=0.9)
    monkeypatch.delenv(environment.METRICS_PATH)
    monkeypatch.setenv("RANK", "0")
    report_metric(accuracy=0.9)  # a script run by hand: nothing to write to, no error
    assert len(path.read_text().splitlines()) == 2


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: report_metric(), "no metric given"),
        (lambda: report_metric(accuracy=float("nan")), "metric 'accuracy' must be a finite number"),
        (lambda: report_metric(accuracy="high"), "metric 'accuracy' must be a finite number"),
        (lambda: report_metric(accuracy=0.5, step=-1), "step must be an integer >= 0"),
    ],
)
def test_a_bad_report_is_one_error_naming_what_is_wrong(call, message):
    with pytest.raises(AgentError, match=message):
        call()


def test_a_line_that_is_not_a_record_names_its_source():
    with pytest.raises(ReportError, match=r"m\.jsonl, line 3: not a JSON line"):
        parse_metric_line("{oops", "m.jsonl, line 3")
    with pytest.raises(ReportError, match="expected an object with 'metrics'"):
        parse_metric_line('{"at": 1}', "m.jsonl, line 3")

"""`report.html` of a simulation: one file that opens from disk, offline, with its table and charts, in a browser;
every chart lists the policies in the table's order, in their colours (`pollux.sim.palette`)."""

from __future__ import annotations

import re

import pytest

from pollux.cluster import Cluster
from pollux.policies.registry import make_policy
from pollux.sim.palette import policy_colors
from pollux.sim.parametric import load_catalog
from pollux.sim.report import write_outputs
from pollux.sim.run import SimConfig, simulate
from pollux.sim.table import columns_of, in_table_order
from pollux.sim.workload import WorkloadJob


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Two policies on six catalog jobs, written as `pollux simulate --out` writes them."""
    models = load_catalog()
    apps = sorted(models)[:3]
    rows = [
        WorkloadJob(f"job-{i}", 300 * i, app, 2, models[app].init_batch_size)
        for i, app in enumerate(apps[i % len(apps)] for i in range(6))
    ]
    config = SimConfig(cluster=Cluster(2, 4))
    results = [simulate(rows, make_policy(name), models, config) for name in ("fifo", "pollux")]
    out = tmp_path_factory.mktemp("sim")
    write_outputs(results, out, "six catalog jobs on 2x4", config.cluster.num_gpus)
    return out / "report.html", results


def test_the_report_is_one_file_that_needs_no_network(report):
    path, _ = report
    text = path.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), "the report must not load anything"
    assert "<script src" not in text and "<link" not in text


def test_the_report_opens_from_disk_with_its_table_and_charts(report, browser, artifact_dir):
    path, results = report
    browser.open(path.as_uri())
    browser.wait_for("document.body.dataset.ready === '1'", what="the report's script")
    policies = browser.evaluate(
        "[...document.querySelectorAll('#summary-body tr td:first-child')].map(td => td.textContent)"
    )
    assert sorted(policies) == sorted(r.policy for r in results)
    for chart in ("jct-cdf", "fairness", "sia-fairness", "gpus-in-use", "queued", "job-gpus", "job-batch"):
        lines = browser.evaluate(f"document.querySelectorAll('#{chart} svg path').length")
        assert lines == len(results), f"{chart}: {lines} lines for {len(results)} policies"
    marks = browser.evaluate("[...document.querySelectorAll('#sia-fairness svg line.mark')].map(l => l.textContent)")
    assert marks == ["ρ = 1"], "Sia's ρ CDF marks ρ = 1"
    chosen = browser.evaluate("document.getElementById('job-choice').value")
    assert chosen in {job.name for job in results[0].jobs}
    browser.screenshot(artifact_dir / "report.png")


def test_the_charts_follow_the_table_order_in_the_palette_colours_and_the_columns_are_explained(report, browser):
    path, results = report
    browser.open(path.as_uri())
    browser.wait_for("document.body.dataset.ready === '1'", what="the report's script")
    table = [r.policy for r in in_table_order(results)]
    rows = browser.evaluate(
        "[...document.querySelectorAll('#summary-body tr td:first-child')].map(td => td.textContent)"
    )
    assert rows == table
    colors = {name: color.lower() for name, color in policy_colors(table).items()}
    for chart in ("jct-cdf", "gpus-in-use", "queued"):
        legend = browser.evaluate(f"[...document.querySelectorAll('#{chart} .legend > span')].map(s => s.textContent)")
        assert legend == table, chart
        strokes = browser.evaluate(
            f"[...document.querySelectorAll('#{chart} svg path')].map(p => [p.textContent, p.getAttribute('stroke')])"
        )
        assert {name: stroke.lower() for name, stroke in strokes} == colors, chart
    notes = browser.evaluate("document.getElementById('summary-notes').textContent")
    for column in columns_of(results):
        assert column.label + column.meaning in notes, column.label

"""The pictures of a simulation: one colour per policy wherever it is drawn (PNG and report.html take it from
`pollux.sim.palette` alone), legends in the table's order, GPU-hours by type only where there are types, the
table's columns explained under it, and progress bars that count the seconds the table's "wall s" counts."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from matplotlib.colors import to_hex
from rich.progress import Progress

from pollux.cluster import Cluster
from pollux.console import plain_console
from pollux.policies.registry import POLICIES, make_policy
from pollux.sim.cli import summary_table, table_width
from pollux.sim.palette import PALETTE, POLICY_COLORS, policy_colors
from pollux.sim.parametric import load_catalog
from pollux.sim.progress import SimulatingSeconds
from pollux.sim.report import figures, write_outputs
from pollux.sim.report_html import report_data
from pollux.sim.run import SimConfig, simulate
from pollux.sim.table import columns_of, in_table_order
from pollux.sim.workload import WorkloadJob

POLICIES_RUN = ("fifo", "optimus", "elastic-dp")  # the table puts elastic-dp first (best JCT here)


@pytest.fixture(scope="module")
def results():
    """Three policies on six catalog jobs on one GPU type."""
    models = load_catalog()
    apps = sorted(models)[:3]
    rows = [WorkloadJob(f"job-{i}", 200 * i, apps[i % 3], 2, models[apps[i % 3]].init_batch_size) for i in range(6)]
    config = SimConfig(cluster=Cluster(2, 4))
    return [simulate(rows, make_policy(name), models, config) for name in POLICIES_RUN]


def lines_of(fig) -> list[tuple[str, str]]:
    """(label, colour) of every labelled line of a figure's axes, in drawing order."""
    return [
        (line.get_label(), to_hex(line.get_color()))
        for ax in fig.axes
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    ]


def legend_of(fig) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert len(legends) == 1
    return [text.get_text() for text in legends[0].get_texts()]


def test_every_registered_policy_has_a_colour_of_its_own_from_one_palette():
    assert set(POLICY_COLORS) == set(POLICIES)
    assert sorted(POLICY_COLORS.values()) == sorted(PALETTE)  # one colour per policy, none twice
    assert policy_colors(["gavel", "optimus"]) == {"gavel": POLICY_COLORS["gavel"], "optimus": POLICY_COLORS["optimus"]}


def test_unregistered_policies_take_colours_no_policy_of_the_run_has_whatever_the_order():
    names = ["pollux", "mine", "fifo", "yours"]
    colors = policy_colors(names)
    assert len(set(colors.values())) == 4 and colors["pollux"] == POLICY_COLORS["pollux"]
    assert policy_colors(reversed(names)) == colors


def test_png_and_html_draw_each_policy_in_one_colour_with_legends_in_the_table_order(results, tmp_path):
    table = [r.policy for r in in_table_order(results)]
    assert table != list(POLICIES_RUN), "the run must list the policies in another order than the table"
    data = report_data(results, "t", 8)
    html_colors = {p["policy"]: p["color"] for p in data["policies"]}
    assert [p["policy"] for p in data["policies"]] == table  # the report's table and legends follow this order
    assert html_colors == {name: POLICY_COLORS[name] for name in POLICIES_RUN}
    made = figures(in_table_order(results))
    try:
        for name in ("jct-cdf.png", "cluster-timeline.png"):
            assert legend_of(made[name]) == table, name
            assert dict(lines_of(made[name])) == {k: v.lower() for k, v in html_colors.items()}, name
    finally:
        import matplotlib.pyplot as plt

        for fig in made.values():
            plt.close(fig)
    write_outputs(results, tmp_path)  # the files written follow the same order (results in the run's order)
    page = (tmp_path / "report.html").read_text()
    inlined = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)[1])
    assert [p["policy"] for p in inlined["policies"]] == table


def test_the_cluster_timeline_legend_lies_outside_its_plots(results):
    import matplotlib.pyplot as plt

    made = figures(results)
    fig = made["cluster-timeline.png"]
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert not any(legend.overlaps(ax.get_window_extent()) for ax in fig.axes)
    for each in made.values():
        plt.close(each)


def test_gpu_hours_by_type_is_drawn_only_where_jobs_had_several_gpu_types(results, tmp_path):
    written = write_outputs(results, tmp_path)
    assert not (tmp_path / "gpu-hours-by-type.png").exists()
    assert "gpu-hours-by-type" not in (tmp_path / "report.html").read_text()
    assert {p.name for p in written if p.suffix == ".png"} == {"jct-cdf.png", "cluster-timeline.png"}
    typed = [
        replace(r, jobs=tuple(replace(j, gpu_seconds_by_type={"aws": j.gpu_seconds, "rtx": 0.0}) for j in r.jobs))
        for r in results
    ]
    import matplotlib.pyplot as plt

    made = figures(typed)
    assert "gpu-hours-by-type.png" in made
    for fig in made.values():
        plt.close(fig)


def test_sias_fairness_has_columns_only_where_the_cluster_had_several_gpu_types(results):
    labels = [column.label for column in columns_of(results)]
    assert "Sia worst ρ" not in labels and "worst ρ" in labels  # on one type it is ρ again
    typed = [
        replace(r, jobs=tuple(replace(j, gpu_seconds_by_type={"aws": j.gpu_seconds, "rtx": 0.0}) for j in r.jobs))
        for r in results
    ]
    labels = [column.label for column in columns_of(typed)]
    assert labels.index("worst ρ") + 2 == labels.index("Sia worst ρ")
    first = report_data(typed, "typed", 8)["policies"][0]
    worst = in_table_order(typed)[0].summary["sia_worst_fairness"]
    assert first["cells"][labels.index("Sia worst ρ")] == f"{worst:.1f}"
    console = plain_console(width=table_width(typed))
    with console.capture() as captured:
        console.print(summary_table(typed, "on two types"))
    assert "…" not in captured.get(), "the added columns cut no header short"


def test_the_cli_table_explains_every_column_in_its_caption(results):
    console = plain_console(width=120)
    with console.capture() as captured:
        console.print(summary_table(results, "six jobs"))
    text = " ".join(captured.get().split())
    for column in columns_of(results):
        assert f"{column.label}: {column.meaning}" in text, column.label
    assert "ρ>1: share of jobs that finished later than alone" in text


def test_a_progress_bar_counts_from_its_simulation_start_until_its_result_as_wall_s_does():
    now = [100.0]
    bars = Progress(SimulatingSeconds(), get_time=lambda: now[0], auto_refresh=False, disable=True)
    task = bars.add_task("gavel", total=None, start=False)
    render = lambda: str(SimulatingSeconds().render(bars.tasks[task]))  # noqa: E731
    now[0] += 55.0  # waiting for a free process: not counted
    assert render() == "waiting"
    bars.start_task(task)
    now[0] += 0.5
    bars.update(task, completed=160, total=160)  # its last job finished; fairness is measured after
    now[0] += 0.4
    assert render() == "simulating 0.9 s"
    bars.stop_task(task)
    now[0] += 10.0
    assert render() == "simulated in 0.9 s"

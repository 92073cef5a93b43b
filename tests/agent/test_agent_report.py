"""The job report: versioned JSON, validated on read, and readable without torch."""

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from pollux.agent.report import (
    SCHEMA_VERSION,
    BatchInUse,
    JobReport,
    Progress,
    ThroughputSample,
    json_schema,
    read_report,
    write_report,
)
from pollux.errors import ReportError
from pollux.goodput import GradientStats, ThroughputParams

REPORT = JobReport(
    status="running",
    job_name="cifar",
    started_at_s=1.0e9,
    written_at_s=1.0e9 + 60,
    init_batch_size=64,
    max_batch_size=1024,
    local_bsz_bounds=(16, 256),
    gradient_accumulation=True,
    adaptive_batch_size=True,
    throughput_params=ThroughputParams(0.02, 0.0008, 0.03, 0.003, 0.12, 0.003, 2.0),
    grad_stats=GradientStats(sqr=1.0, var=5.0),
    batch=BatchInUse(num_nodes=1, num_replicas=2, local_bsz=96, accum_steps=1),
    progress=Progress(epoch=3, epoch_examples=5120, epoch_size=50000, steps=700, examples=100000, m0_steps=900.5),
    max_replicas_seen=2,
    throughput_configs=4,
    restarts=1,
)


def test_a_written_report_reads_back_equal(tmp_path):
    path = write_report(tmp_path / "job" / "report.json", REPORT)
    assert read_report(path) == REPORT
    data = json.loads(path.read_text())
    assert (data["schema"], data["version"]) == ("pollux.agent.report", SCHEMA_VERSION)
    assert data["batch"]["total_batch_size"] == 2 * 96 * 2


def test_the_report_rebuilds_the_jobs_goodput_function(tmp_path):
    fn = read_report(write_report(tmp_path / "r.json", REPORT)).goodput_function()
    assert fn.init_batch_size == 64
    assert float(fn.optimize(1, 2, 1024, (16, 256), True).goodput) > 0


def test_before_any_measurement_there_is_no_goodput_function(tmp_path):
    report = JobReport(**{**REPORT.__dict__, "throughput_params": None, "grad_stats": None})
    assert read_report(write_report(tmp_path / "r.json", report)).goodput_function() is None


def mutated(tmp_path, change):
    data = REPORT.to_json_dict()
    change(data)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(version=SCHEMA_VERSION + 1), "newer than this reader"),
        (lambda d: d.pop("grad_stats"), "missing field 'grad_stats'"),
        (lambda d: d["batch"].update(local_bsz=0), "field 'batch.local_bsz' must be an integer >= 1"),
        (lambda d: d.update(init_batch_size=True), "field 'init_batch_size' must be an integer"),
        (lambda d: d["throughput_params"].update(gamma=0.5), "valid ThroughputParams"),
        (lambda d: d["grad_stats"].update(var=-1.0), "field 'grad_stats.var' must be a number >= 0"),
        (lambda d: d.update(status="lost"), "field 'status' must be one of"),
        (lambda d: d.update(max_batch_size=8), "field 'max_batch_size' must be an integer >= 64"),
        (lambda d: d.update(schema="other"), "field 'schema'"),
    ],
)
def test_a_bad_report_is_refused_naming_the_file_and_field(tmp_path, change, message):
    path = mutated(tmp_path, change)
    with pytest.raises(ReportError, match=message) as err:
        read_report(path)
    assert str(path) in str(err.value)


def test_a_report_keys_samples_and_models_by_gpu_type(tmp_path):
    sample = ThroughputSample(1, 2, 96, 1, 0.05, 0.12)
    typed = replace(
        REPORT,
        gpu_type="a100",
        throughput_params_by_type={
            "a100": REPORT.throughput_params,
            "rtx": ThroughputParams(0.1, 0.002, 0.03, 0.003, 0.1, 0.003, 1.5),
        },
        local_bsz_bounds_by_type={"a100": (16, 256), "rtx": (16, 64)},
        run_time_by_type_s={"a100": 30.0, "rtx": 12.5},
        throughput_samples_by_type={"a100": (sample,)},
    )
    assert read_report(write_report(tmp_path / "r.json", typed)) == typed


def test_a_version_1_report_still_reads_as_a_job_of_no_known_type(tmp_path):
    data = REPORT.to_json_dict()
    data["version"] = 1
    for key in ("gpu_type", "throughput_params_by_type", "local_bsz_bounds_by_type", "run_time_by_type_s"):
        data.pop(key)
    data.pop("throughput_samples_by_type")
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(data))
    old = read_report(path)
    assert old == REPORT and old.gpu_type is None and old.throughput_params_by_type == {}


def test_unknown_extra_fields_are_accepted(tmp_path):
    assert read_report(mutated(tmp_path, lambda d: d.update(future_field=1))) == REPORT


def test_unreadable_and_non_json_files_are_report_errors(tmp_path):
    with pytest.raises(ReportError, match="cannot read"):
        read_report(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ReportError, match="not valid JSON"):
        read_report(tmp_path / "bad.json")


def test_reading_reports_never_imports_torch():
    code = "import sys, pollux.agent, pollux.agent.report; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


DOC = Path(__file__).resolve().parents[2] / "docs" / "agent-report-schema.md"


def documented_fields() -> dict[str, set[str]]:
    """The field names in the doc's tables: '' for the report's own table, else the object a table describes."""
    tables: dict[str, set[str]] = {}
    current = None
    for line in DOC.read_text().splitlines():
        if line == "## Fields":
            current = ""
        elif match := re.match(r"^`(\w+)`.*:$", line):
            current = match.group(1)
        elif line.startswith("| `") and current is not None:
            tables.setdefault(current, set()).update(re.findall(r"`(\w+)`", line.split("|")[1]))
    return tables


def test_the_docs_tables_name_every_field_a_report_has_and_no_other():
    written = REPORT.to_json_dict()
    tables = documented_fields()
    assert tables.pop("") == set(written)
    assert tables == {name: set(written[name]) for name in ("throughput_params", "grad_stats", "batch", "progress")}


def test_the_docs_example_is_a_valid_report_by_the_reader_and_by_the_json_schema(tmp_path):
    example = re.search(r"```json\n(.*?)```", DOC.read_text(), re.DOTALL).group(1)
    path = tmp_path / "example.json"
    path.write_text(example)
    assert read_report(path).throughput_params_by_type["a100"] == read_report(path).throughput_params
    schema = json_schema()
    Draft202012Validator.check_schema(schema)
    assert not list(Draft202012Validator(schema).iter_errors(json.loads(example)))
    assert list(Draft202012Validator(schema).iter_errors({**json.loads(example), "version": "2"}))


def test_the_declared_epochs_read_back_and_a_report_without_them_reads_as_none(tmp_path):
    """`progress.epochs` came after version 2 was fixed: a report that has it round-trips, one that lacks it (written
    before, or by a loop that declares none) reads as None; epochs done count the current one's share."""
    declared = replace(REPORT, progress=replace(REPORT.progress, epochs=10))
    assert read_report(write_report(tmp_path / "r.json", declared)).progress.epochs == 10
    older = mutated(tmp_path, lambda d: d["progress"].pop("epochs", None))
    assert read_report(older).progress.epochs is None
    assert REPORT.progress.epochs_done == 3 + 5120 / 50000

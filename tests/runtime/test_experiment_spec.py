"""Experiment specs (`pollux tune`): a trial's job from the [job] template, and bad specs refused in one line that
names the field."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from pollux.errors import SpecError
from pollux.runtime.experiment import load_experiment, parse_experiment

EXPERIMENT = """
name = "hpo"
metric = "accuracy"
mode = "max"
trials = 6
concurrency = 2
[space]
lr = { type = "loguniform", low = 0.001, high = 0.3 }
batch_size = { type = "choice", values = [16, 64] }
momentum = { type = "uniform", low = 0.5, high = 0.99 }
hidden = { type = "int", low = 32, high = 256 }
[asha]
grace_period = 2
[job]
command = ["python", "train.py", "--lr", "{lr:.3g}", "--batch-size", "{batch_size}", "--hidden={hidden}"]
init_batch_size = "{batch_size}"
max_batch_size = 512
local_bsz_bounds = [8, 128]
"""


@pytest.fixture()
def base(tmp_path: Path) -> dict:
    (tmp_path / "train.py").write_text("")
    return tomllib.loads(EXPERIMENT)


def test_a_trial_is_the_job_template_with_its_values_named_after_the_experiment_and_trial(tmp_path, base):
    path = tmp_path / "hpo.toml"
    path.write_text('tenant = "vision"\n' + EXPERIMENT)
    spec = load_experiment(path)
    assert (spec.search, spec.asha.grace_period, spec.storage(Path("/s"))) == ("tpe", 2, Path("/s/experiments"))
    config = {"lr": 0.0123456, "batch_size": 64, "momentum": 0.9, "hidden": 100}
    job = spec.trial_spec(config, "0a1b2c3d", "hpo.toml")
    assert (job.name, job.experiment, job.trial, job.tenant) == ("hpo-0a1b2c3d", "hpo", "0a1b2c3d", "vision")
    assert job.init_batch_size == 64  # the whole field "{batch_size}": the value itself, an integer
    assert job.command == ("python", "train.py", "--lr", "0.0123", "--batch-size", "64", "--hidden=100")
    assert job.workdir == tmp_path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"space": {"lr": {"type": "normal", "low": 0, "high": 1}}}, "field 'space.lr': expected a distribution"),
        ({"space": {"lr": {"type": "uniform", "low": 2.0, "high": 1.0}}}, "field 'space.lr.low': 2.0 must be below"),
        ({"space": {"lr": {"type": "loguniform", "low": 0.0, "high": 1.0}}}, "'space.lr.low': 0.0 must be > 0"),
        ({"space": {"n": {"type": "int", "low": 3, "high": 3}}}, "field 'space.n.low': 3 must be below high 3"),
        ({"space": {"b": {"type": "choice", "values": []}}}, "field 'space.b.values': expected at least 1 item"),
        ({"concurrency": 0}, "field 'concurrency': expected an integer >= 1"),
        ({"concurrency": 7}, "field 'concurrency': 7 exceeds trials 6"),
        ({"mode": "maximize"}, "field 'mode': expected one of 'max' or 'min'"),
        ({"search": "bayes"}, "field 'search': expected one of 'tpe' or 'random'"),
        ({"metric": "training_iteration"}, "field 'metric': 'training_iteration' is a key Ray Tune"),
        ({"metric": "top 5"}, "field 'metric': expected a name the script reports"),
        ({"asha": {"grace_period": 5, "max_t": 2}}, "field 'asha.grace_period': 5 exceeds max_t 2"),
        ({"asha": {"grace": 1}}, "unknown field 'asha.grace'; accepted: grace_period"),
        ({"trials": 3, "concurrency": 1, "colour": 1}, "unknown field 'colour'"),
        ({"job": {"command": "python train.py {seed}", "init_batch_size": 8}}, "'job.command': {seed} names no"),
        ({"job": {"name": "x", "command": "python train.py", "init_batch_size": 8}}, "'job.name': is set by pollux"),
        (
            {"job": {"command": "python train.py", "init_batch_size": "{batch_size}", "max_batch_size": 32}},
            "[job] with lr=0.3, batch_size=64, momentum=0.99, hidden=256: field 'init_batch_size': 64 exceeds",
        ),
    ],
)
def test_a_bad_experiment_is_one_line_naming_the_field(tmp_path, base, change, message):
    with pytest.raises(SpecError) as error:
        parse_experiment({**base, **change}, "hpo.toml", tmp_path)
    text = str(error.value)
    assert "\n" not in text and text.startswith("hpo.toml") and message in text, text


def test_pollux_tune_refuses_a_bad_experiment_in_one_line_with_exit_2_before_anything_starts(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "hpo.toml"
    path.write_text(EXPERIMENT.replace('mode = "max"', 'mode = "up"'))
    result = subprocess.run(
        [sys.executable, "-m", "pollux", "tune", str(path), "--state-dir", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr == f"error: {path}: field 'mode': expected one of 'max' or 'min', got 'up'\n"

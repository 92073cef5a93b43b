"""Job specs: a good one parses, and every bad field is refused with its name and the accepted values."""

from pathlib import Path

import pytest

from pollux.errors import SpecError
from pollux.runtime.spec import JobSpec, load_spec, parse_spec

GOOD = """
name = "cifar-resnet"
command = ["python", "train.py", "--epochs", "3"]
init_batch_size = 128
max_batch_size = 4096
local_bsz_bounds = [32, 512]
max_gpus = 8
checkpoint_dir = "ckpt"
"""


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


def write(directory: Path, text: str) -> Path:
    path = directory / "job.toml"
    path.write_text(text)
    return path


def test_a_good_spec_parses_with_paths_relative_to_the_file(spec_dir):
    spec = load_spec(write(spec_dir, GOOD))
    assert spec.name == "cifar-resnet"
    assert spec.command == ("python", "train.py", "--epochs", "3")
    assert spec.local_bsz_bounds == (32, 512)
    assert spec.checkpoint_dir == spec_dir.resolve() / "ckpt"
    assert spec.adaptive and spec.min_gpus == 0 and spec.max_gpus == 8


def test_a_command_string_is_split_like_a_shell(spec_dir):
    spec = parse_spec({"name": "a", "command": "python train.py --lr '0.1'", "init_batch_size": 8}, base=spec_dir)
    assert spec.command == ("python", "train.py", "--lr", "0.1")


@pytest.mark.parametrize(
    "change,field",
    [
        ({"name": "Bad_Name"}, "name"),
        ({"command": []}, "command"),
        ({"command": ["python", "missing.py"]}, "command"),
        ({"init_batch_size": 0}, "init_batch_size"),
        ({"max_batch_size": 64}, "init_batch_size"),  # the max frames the initial batch, not the other way round
        ({"max_batch_size": 512, "local_bsz_bounds": [8, 1024]}, "local_bsz_bounds"),
        ({"max_batch_size": 512, "local_bsz_bounds_by_type": {"rtx": [8, 1024]}}, "local_bsz_bounds_by_type.rtx"),
        ({"max_batch_size": 512, "local_bsz_bounds": [128, 256], "gpus": 8}, "gpus"),
        ({"min_gpus": 8, "max_gpus": 4}, "min_gpus"),
        ({"gpu_types": ["a100"], "single_gpu_throughput": {"rtx": 300.0}}, "single_gpu_throughput.rtx"),
        ({"gpu_types": ["a100"], "local_bsz_bounds_by_type": {"rtx": [8, 64]}}, "local_bsz_bounds_by_type.rtx"),
        ({"local_bsz_bounds": [64, 32]}, "local_bsz_bounds"),
        ({"local_bsz_bounds": [32]}, "local_bsz_bounds"),
        ({"min_gpus": 40, "local_bsz_bounds": [128, 256]}, "min_gpus"),
        ({"max_gpus": 0}, "max_gpus"),
        ({"adaptive": "yes"}, "adaptive"),
        ({"priority": 1.5}, "priority"),
        ({"gpus": 100}, "gpus"),
        ({"gpu_count": 4}, "gpu_count"),
        ({"checkpoint_interval_s": 0}, "checkpoint_interval_s"),
        ({"checkpoint_interval_s": "5m"}, "checkpoint_interval_s"),
    ],
)
def test_each_bad_field_is_named_in_the_error(spec_dir, change, field):
    data = {"name": "job", "command": ["python", "train.py"], "init_batch_size": 128, "max_batch_size": 4096}
    data.update(change)
    with pytest.raises(SpecError, match=f"'{field}'"):
        parse_spec(data, "job.toml", spec_dir)


def test_a_missing_required_field_is_named(spec_dir):
    with pytest.raises(SpecError, match="missing required field 'init_batch_size'"):
        parse_spec({"name": "job", "command": "python train.py"}, "job.toml", spec_dir)


def test_unreadable_files_are_refused_with_the_path(tmp_path):
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "nope.toml")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(write(tmp_path, "name = \n"))


def test_a_jobs_checkpoint_interval_is_kept_and_reaches_its_agent_before_the_services(spec_dir, tmp_path):
    from pollux.agent.environment import format_interval
    from pollux.runtime.config import ServiceConfig

    data = {"name": "job", "command": ["python", "train.py"], "init_batch_size": 128, "checkpoint_interval_s": 90}
    spec = parse_spec(data, "job.toml", spec_dir)
    plain = parse_spec({k: v for k, v in data.items() if k != "checkpoint_interval_s"}, "job.toml", spec_dir)
    assert spec.checkpoint_interval_s == 90.0
    service_wide = ServiceConfig(state_dir=tmp_path, checkpoint_interval_s=600.0)
    assert format_interval(service_wide.checkpoint_interval_of(spec)) == "90"
    assert format_interval(service_wide.checkpoint_interval_of(plain)) == "600"
    assert format_interval(ServiceConfig(state_dir=tmp_path).checkpoint_interval_of(plain)) == "auto"


def test_an_error_names_the_file_the_field_what_is_accepted_and_what_it_got(spec_dir):
    data = {"name": "job", "command": ["python", "train.py"], "init_batch_size": 0}
    with pytest.raises(SpecError) as err:
        parse_spec(data, "job.toml", spec_dir)
    assert str(err.value) == "job.toml: field 'init_batch_size': expected an integer >= 1, got 0"
    data.update(init_batch_size=8, local_bsz_bounds_by_type={"rtx": [16, 8]})
    with pytest.raises(SpecError, match=r"'local_bsz_bounds_by_type.rtx': expected \[min, max\] integers"):
        parse_spec(data, "job.toml", spec_dir)


@pytest.mark.parametrize("field", ["priority", "owner", "workdir"])
def test_fields_a_file_cannot_set_are_unknown(spec_dir, field):
    data = {"name": "job", "command": ["python", "train.py"], "init_batch_size": 8, field: "x"}
    with pytest.raises(SpecError, match=f"unknown field '{field}'; accepted fields: name, command, "):
        parse_spec(data, "job.toml", spec_dir)


def test_a_stored_spec_reads_back_equal_even_with_the_legacy_priority_and_owner(spec_dir):
    spec = load_spec(write(spec_dir, GOOD + 'gpu_types = ["a100"]\nlocal_bsz_bounds_by_type = {a100 = [32, 256]}\n'))
    stored = spec.to_json_dict()
    assert stored["checkpoint_dir"] == str(spec_dir.resolve() / "ckpt") and stored["local_bsz_bounds"] == [32, 512]
    assert JobSpec.from_json_dict(stored) == spec
    assert JobSpec.from_json_dict({**stored, "priority": 0, "owner": "alice"}) == spec  # stored by an older version


def test_init_batch_size_over_the_max_blames_init_batch_size_with_the_fix(spec_dir):
    data = {"name": "job", "command": ["python", "train.py"], "init_batch_size": 1024, "max_batch_size": 512}
    with pytest.raises(SpecError) as err:
        parse_spec(data, "job.toml", spec_dir)
    assert str(err.value) == (
        "job.toml: field 'init_batch_size': 1024 exceeds max_batch_size 512; lower init_batch_size or raise "
        "max_batch_size"
    )


def test_a_per_gpu_max_up_to_the_total_max_is_accepted(spec_dir):
    data = {"name": "job", "command": ["python", "train.py"], "init_batch_size": 64, "max_batch_size": 512}
    spec = parse_spec({**data, "local_bsz_bounds": [8, 512], "gpus": 4}, "job.toml", spec_dir)
    assert spec.local_bsz_bounds == (8, 512) and spec.gpus == 4


def test_a_stored_spec_accepted_before_the_per_gpu_rules_still_reads_back(spec_dir):
    """A job stored before the per-GPU max had to fit max_batch_size stays readable: the service resumes it."""
    spec = parse_spec(
        {"name": "job", "command": ["python", "train.py"], "init_batch_size": 64, "max_batch_size": 512},
        "job.toml",
        spec_dir,
    )
    stored = {**spec.to_json_dict(), "local_bsz_bounds": [8, 1024], "gpu_types": ["a100"]}
    stored["single_gpu_throughput"] = {"rtx": 300.0}
    assert JobSpec.from_json_dict(stored).local_bsz_bounds == (8, 1024)

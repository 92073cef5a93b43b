"""load_profile: the real profiles read with the right shapes; every malformed file is named with line and field."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from pollux.data.profiles import MODELS, available_models, load_profile, load_typed_profiles
from pollux.errors import ProfileError

# model: (M0, max batch, epochs per validation run = the artifact's max_epochs)
EXPECTED = {
    "bert": (12, 384, 2),
    "cifar10": (128, 4096, 100),
    "deepspeech2": (20, 640, 80),
    "imagenet": (200, 12800, 90),
    "ncf": (256, 32768, 10),
    "yolov3": (8, 512, 50),
}


@pytest.mark.parametrize("model", MODELS)
def test_real_profile_has_the_papers_batch_bounds_and_consistent_rows(model: str, shared_data: Path) -> None:
    profile = load_profile(model, shared_data)
    m0, max_batch, epochs = EXPECTED[model]
    assert (profile.init_batch_size, profile.max_batch_size) == (m0, max_batch)
    assert list(profile.validation) == sorted(profile.validation)
    assert all(len(run.progress) == epochs for run in profile.validation.values())
    p = profile.placements
    assert len(p.placement) == len(p.local_bsz) == len(p.step_time) == len(p.sync_time) > 0
    assert p.num_nodes.tolist() == [len(s) for s in p.placement]
    assert p.num_replicas.tolist() == [sum(map(int, s)) for s in p.placement]
    assert p.local_bsz.dtype == np.int64
    assert p.step_time.dtype == np.float64
    assert np.all(p.sync_time <= p.step_time)
    assert np.all(profile.scalability.num_replicas >= profile.scalability.num_nodes)


def test_all_six_profiles_load_in_under_a_second(shared_data: Path) -> None:
    start = time.perf_counter()
    for model in MODELS:
        load_profile(model, shared_data)
    assert time.perf_counter() - start < 1.0


def test_available_models_are_the_artifacts_six(shared_data: Path) -> None:
    assert available_models(shared_data) == MODELS


# ---- a small hand-written profile, then one defect at a time ----------------------------------------------------

GOOD = {
    "placements.csv": "placement,local_bsz,step_time,sync_time\n1,32,0.1,0.0\n14,32,0.2,0.05\n",
    "scalability.csv": "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,5,32,0.2,0.05\n",
    "validation-64.csv": "progress,iteration,metric,grad_sqr,grad_var\n100.0,10,0.5,2.0,3.0\n200.0,20,-0.6,1.0,2.0\n",
    "validation-256.csv": "progress,iteration,metric,grad_sqr,grad_var\n100.0,3,0.4,2.0,3.0\n",
}


def write_profile(root: Path, files: dict[str, str | None], model: str = "toy") -> Path:
    folder = root / "profiles" / model
    folder.mkdir(parents=True)
    for name, text in {**GOOD, **files}.items():
        if text is not None:
            (folder / name).write_text(text)
    return root


def test_a_well_formed_small_profile_loads(tmp_path: Path) -> None:
    extra_column = {"scalability.csv": "num_nodes,num_replicas,local_bsz,step_time,sync_time,note\n2,5,32,0.2,0.05,x\n"}
    profile = load_profile("toy", write_profile(tmp_path, extra_column))
    assert profile.placements.placement == ("1", "14")
    assert profile.placements.num_nodes.tolist() == [1, 2]
    assert profile.placements.num_replicas.tolist() == [1, 5]
    assert (profile.init_batch_size, profile.max_batch_size) == (64, 256)
    assert profile.validation[64].metric.tolist() == [0.5, -0.6]
    assert profile.validation[256].iteration.tolist() == [3]
    with pytest.raises(ValueError, match="read-only"):
        profile.placements.step_time[0] = 1.0


PLACEMENTS_HEADER = "placement,local_bsz,step_time,sync_time\n"
VALIDATION_HEADER = "progress,iteration,metric,grad_sqr,grad_var\n"

# id: (files to change, fragments the message must contain: the file (and line), the field, the problem)
BAD = {
    "missing file": ({"scalability.csv": None}, ["scalability.csv", "missing file"]),
    "missing column": (
        {"scalability.csv": "num_nodes,num_replicas,local_bsz,step_time\n2,5,32,0.2\n"},
        ["scalability.csv:1", "missing column 'sync_time'"],
    ),
    "non-numeric integer": (
        {"placements.csv": PLACEMENTS_HEADER + "1,32,0.1,0.0\n4,abc,0.1,0.0\n"},
        ["placements.csv:3", "'local_bsz'", "'abc'", "not an integer"],
    ),
    "non-numeric float": (
        {"validation-64.csv": VALIDATION_HEADER + "100.0,10,0.5,2.0,3.0\n200.0,20,0.6,1.0,lots\n"},
        ["validation-64.csv:3", "'grad_var'", "not a number"],
    ),
    "fractional integer": (
        {"validation-256.csv": VALIDATION_HEADER + "100.0,3.5,0.4,2.0,3.0\n"},
        ["validation-256.csv:2", "'iteration'", "not an integer"],
    ),
    "not finite": (
        {"validation-256.csv": VALIDATION_HEADER + "100.0,3,0.4,nan,3.0\n"},
        ["validation-256.csv:2", "'grad_sqr'", "not finite"],
    ),
    "negative time": (
        {"placements.csv": PLACEMENTS_HEADER + "1,32,0.1,0.0\n4,32,-0.5,0.0\n"},
        ["placements.csv:3", "'step_time'", "negative value"],
    ),
    "negative count": (
        {"scalability.csv": "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,-5,32,0.2,0.05\n"},
        ["scalability.csv:2", "'num_replicas'", "negative value", "positive integer"],
    ),
    "zero batch": (
        {"placements.csv": PLACEMENTS_HEADER + "1,0,0.1,0.0\n"},
        ["placements.csv:2", "'local_bsz'", "zero value"],
    ),
    "placement with a letter": (
        {"placements.csv": PLACEMENTS_HEADER + "1a4,32,0.1,0.0\n"},
        ["placements.csv:2", "'placement'", "'1a4'", "digits 1-9"],
    ),
    "placement with a zero": (
        {"placements.csv": PLACEMENTS_HEADER + "1,32,0.1,0.0\n104,32,0.1,0.0\n"},
        ["placements.csv:3", "'placement'", "digits 1-9"],
    ),
    "empty placement": (
        {"placements.csv": PLACEMENTS_HEADER + ",32,0.1,0.0\n"},
        ["placements.csv:2", "'placement'", "digits 1-9"],
    ),
    "wrong number of fields": (
        {"placements.csv": PLACEMENTS_HEADER + "1,32,0.1\n"},
        ["placements.csv:2", "3 fields", "header has 4"],
    ),
    "empty file": ({"placements.csv": ""}, ["placements.csv:1", "empty file"]),
    "header only": ({"placements.csv": PLACEMENTS_HEADER}, ["placements.csv", "no data rows"]),
    "bad validation file name": ({"validation-big.csv": VALIDATION_HEADER}, ["validation-big.csv", "validation-<M>"]),
    "no validation files": (
        {"validation-64.csv": None, "validation-256.csv": None},
        ["profiles/toy", "validation-<M>.csv"],
    ),
}


@pytest.mark.parametrize(("files", "fragments"), BAD.values(), ids=BAD.keys())
def test_a_malformed_profile_is_named_with_file_line_and_field(
    tmp_path: Path, files: dict[str, str | None], fragments: list[str]
) -> None:
    root = write_profile(tmp_path, files)
    with pytest.raises(ProfileError) as err:
        load_profile("toy", root)
    message = str(err.value)
    assert "\n" not in message
    assert str(root / "profiles" / "toy") in message
    for fragment in fragments:
        assert fragment in message


def test_undecodable_bytes_are_a_profile_error(tmp_path: Path) -> None:
    root = write_profile(tmp_path, {})
    (root / "profiles/toy/placements.csv").write_bytes(b"placement,local_bsz,step_time,sync_time\n1,32,\xff,0\n")
    with pytest.raises(ProfileError, match=r"placements\.csv: not a readable CSV file"):
        load_profile("toy", root)


def test_an_unknown_model_lists_the_known_ones(tmp_path: Path) -> None:
    root = write_profile(tmp_path, {})
    with pytest.raises(ProfileError) as err:
        load_profile("resnet", root)
    message = str(err.value)
    assert "unknown model 'resnet'" in message
    assert str(root / "profiles" / "resnet") in message
    for known in (*MODELS, "toy"):
        assert known in message


def test_a_known_model_without_its_folder_reports_the_missing_file(tmp_path: Path) -> None:
    root = write_profile(tmp_path, {})
    with pytest.raises(ProfileError, match=r"profiles/bert/placements\.csv: missing file"):
        load_profile("bert", root)


def test_a_whole_number_written_as_a_float_is_an_integer(tmp_path: Path) -> None:
    """Sia's imagenet `dgx` files write per-GPU batches as `20.0`; a fraction stays an error (above)."""
    root = write_profile(tmp_path, {"placements.csv": PLACEMENTS_HEADER + "1,32.0,0.1,0.0\n14,3.2e1,0.2,0.05\n"})
    assert load_profile("toy", root).placements.local_bsz.tolist() == [32, 32]


# ---- typed profiles: one pair of step-time files per GPU type, validation runs shared ----------------------------


def same_rows(a: object, b: object) -> bool:
    """Two row tables (`PlacementRows`, `ScalabilityRows`) with equal columns."""
    fields = type(a).__dataclass_fields__  # type: ignore[attr-defined]
    return type(a) is type(b) and all(np.array_equal(getattr(a, f), getattr(b, f)) for f in fields)


TYPED = {
    "placements-fast.csv": "local_bsz,step_time,sync_time,placement\n32,0.05,0.0,1\n32,0.1,0.02,14\n",
    "scalability-fast.csv": "local_bsz,step_time,sync_time,num_nodes,num_replicas\n32,0.1,0.02,2,5\n",
}


def test_typed_files_are_read_per_gpu_type_whatever_their_column_order(tmp_path: Path) -> None:
    root = write_profile(tmp_path, TYPED)
    fast = load_profile("toy", root, gpu_type="fast")
    assert fast.gpu_type == "fast"
    assert fast.placements.placement == ("1", "14")
    assert fast.placements.step_time.tolist() == [0.05, 0.1]
    assert fast.scalability.num_replicas.tolist() == [5]
    assert load_profile("toy", root).gpu_type is None
    profiles = load_typed_profiles("toy", root)
    assert list(profiles) == ["fast"]
    assert same_rows(profiles["fast"].placements, fast.placements)


def test_a_gpu_type_not_profiled_is_refused_naming_the_profiled_ones(tmp_path: Path) -> None:
    root = write_profile(tmp_path, TYPED)
    with pytest.raises(ProfileError) as err:
        load_profile("toy", root, gpu_type="h100")
    message = str(err.value)
    assert "placements-h100.csv" in message
    assert "model 'toy' was not profiled on GPU type 'h100'; profiled types: fast" in message


SIA_TYPES = ("aws", "azure", "dgx", "dgx-ext", "quad", "rtx")


def test_every_sia_model_loads_on_every_type_it_was_profiled_on(sia_shared_data: Path) -> None:
    assert available_models(sia_shared_data) == (*MODELS[:3], "gpt_pmp", *MODELS[3:])
    for model in MODELS:
        profiles = load_typed_profiles(model, sia_shared_data)
        assert tuple(profiles) == SIA_TYPES
        validation = {id(p.validation) for p in profiles.values()}
        assert len(validation) == 1, "one read of the validation runs, shared by every type"
        for profile in profiles.values():
            assert np.all(profile.scalability.num_replicas >= profile.scalability.num_nodes)
    assert tuple(load_typed_profiles("gpt_pmp", sia_shared_data)) == ("dgx-ext", "rtx")


def test_sia_aws_profiles_read_as_the_pollux_ones(shared_data: Path, sia_shared_data: Path) -> None:
    for model in MODELS:
        pollux = load_profile(model, shared_data)
        sia = load_profile(model, sia_shared_data, gpu_type="aws")
        assert same_rows(sia.placements, pollux.placements)
        assert same_rows(sia.scalability, pollux.scalability)

"""Parametric job types: the shipped catalog loads, bad entries are named, and it stands in for the profiles."""

import re
from pathlib import Path

import pytest

from pollux.data.locate import find_data_dir
from pollux.errors import CatalogError, DataNotFoundError, SpecError
from pollux.goodput import ThroughputParams, compute_time, efficiency, iteration_time
from pollux.sim.jobmodel import run_time_s
from pollux.sim.measured import load_measured_models
from pollux.sim.parametric import DEFAULT_CATALOG, ParametricJobModel, load_catalog, load_typed_catalog

GOOD = """\
[toy]
description = "a small job"
init_batch_size = 64
max_batch_size = 1024
min_local_bsz = 16
max_local_bsz = 256
max_epochs = 10
progress_per_epoch = 100.0
noise_scale = [[0.0, 100.0], [1.0, 1100.0]]

[toy.throughput]
alpha_c = 0.02
beta_c = 0.001
alpha_r = 0.01
beta_r = 0.002
alpha_n = 0.05
beta_n = 0.004
gamma = 1.5
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalog.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def toy(tmp_path) -> ParametricJobModel:
    return load_catalog(write(tmp_path, GOOD))["toy"]


def test_the_shipped_catalog_has_the_six_artifact_models():
    catalog = load_catalog()
    assert sorted(catalog) == ["bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"]
    assert catalog["yolov3"].max_local_bsz == 8
    assert catalog["cifar10"].max_epochs == 100


def test_the_format_documented_in_the_catalog_header_loads(tmp_path):
    header = [line for line in DEFAULT_CATALOG.read_text(encoding="utf-8").splitlines() if line.startswith("#   ")]
    example = "\n".join(re.sub(r"\s+#.*$", "", line[4:]) for line in header)
    (model,) = load_catalog(write(tmp_path, example)).values()
    assert model.name == "my-model" and model.max_epochs == 100
    (typed,) = load_typed_catalog(write(tmp_path, example)).values()
    assert typed.gpu_types == ("aws", "dgx-ext")
    assert typed.on("dgx-ext").max_local_bsz == 4096


def test_step_time_is_the_throughput_model_and_sync_is_what_exceeds_compute(toy):
    step_s, sync_s = toy.step_time((0, 2, 2), 32)  # 2 nodes, 4 replicas
    assert step_s == pytest.approx(float(iteration_time(toy.throughput, 2, 4, 32)))
    assert step_s - sync_s == pytest.approx(float(compute_time(toy.throughput, 32)))
    assert toy.step_time((1,), 32)[1] == pytest.approx(0.0, abs=1e-15)  # one GPU: nothing to synchronize
    assert toy.step_time((2, 2, 0), 32) == toy.step_time((0, 2, 2), 32)


def test_noise_scale_is_interpolated_at_the_middle_of_each_epoch(toy):
    # φ(f) = 100 + 1000·f; epoch 4 of 10 is centred at f = 0.45
    stats = toy.grad_stats(256, 4)
    phi = toy.init_batch_size * stats.var / stats.sqr
    assert phi == pytest.approx(550.0)
    assert float(efficiency(stats, 64, 256)) == pytest.approx((550 + 64) / (550 + 256))
    assert toy.grad_stats(64, 4) == stats  # independent of the batch size


def test_epoch_progress_is_linear_up_to_max_epochs(toy):
    assert [toy.epoch_progress(e) for e in (0, 1, 10)] == [0.0, 100.0, 1000.0]
    with pytest.raises(ValueError, match="epoch 11"):
        toy.epoch_progress(11)


def replace(field: str, new: str) -> str:
    """GOOD with the line starting `field =` replaced by `new` (or removed when `new` is empty)."""
    lines = [(new if line.startswith(f"{field} =") else line) for line in GOOD.splitlines()]
    return "\n".join(line for line in lines if line) + "\n"


BAD_ENTRIES = [
    (replace("max_epochs", ""), "max_epochs", "missing field"),
    (replace("alpha_n", ""), "throughput.alpha_n", "missing field"),
    (replace("max_epochs", 'max_epochs = "ten"'), "max_epochs", "not a positive integer"),
    (replace("max_epochs", "max_epochs = 2.5"), "max_epochs", "not a positive integer"),
    (replace("max_epochs", "max_epochs = true"), "max_epochs", "not a positive integer"),
    (replace("min_local_bsz", "min_local_bsz = -4"), "min_local_bsz", "not a positive integer"),
    (replace("beta_c", "beta_c = -0.001"), "throughput.beta_c", "out of range"),
    (replace("beta_c", 'beta_c = "fast"'), "throughput.beta_c", "not a finite number"),
    (replace("gamma", "gamma = 0.5"), "throughput.gamma", "out of range"),
    (replace("gamma", "gamma = nan"), "throughput.gamma", "not a finite number"),
    (replace("progress_per_epoch", "progress_per_epoch = 0"), "progress_per_epoch", "out of range"),
    (replace("min_local_bsz", "min_local_bsz = 512"), "min_local_bsz", "> max_local_bsz"),
    (replace("init_batch_size", "init_batch_size = 2048"), "init_batch_size", "> max_batch_size"),
    (
        GOOD.replace("min_local_bsz = 16", "min_local_bsz = 2048").replace(
            "max_local_bsz = 256", "max_local_bsz = 4096"
        ),
        "min_local_bsz",
        "> max_batch_size",
    ),
    (replace("description", "colour = 'blue'"), "colour", "unknown field"),
    (replace("gamma", "gamma = 1.5\ndelta = 1.0"), "throughput.delta", "unknown field"),
    (replace("noise_scale", "noise_scale = []"), "noise_scale", "expected a list"),
    (replace("noise_scale", "noise_scale = [[0.5, 1.0], [0.2, 2.0]]"), "noise_scale[1] fraction", "out of order"),
    (replace("noise_scale", "noise_scale = [[0.5, -1.0]]"), "noise_scale[0] φ", "out of range"),
    (replace("noise_scale", "noise_scale = [[0.5]]"), "noise_scale[0]", "not a pair"),
    (replace("description", "description = 3"), "description", "not a string"),
    (GOOD.replace("[toy]", '["bad name"]').replace("[toy.", '["bad name".'), "", "bad type name"),
]


@pytest.mark.parametrize(
    ("text", "field", "problem"), BAD_ENTRIES, ids=[f"{f or 'name'}: {p}" for _, f, p in BAD_ENTRIES]
)
def test_a_bad_entry_names_file_type_and_field(tmp_path, text, field, problem):
    path = write(tmp_path, text)
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    message = str(caught.value)
    assert message.startswith(str(path))
    assert f"] {field}: " in message if field else "bad name" in message
    assert problem in message


def test_unreadable_catalogs_are_catalog_errors(tmp_path):
    assert issubclass(CatalogError, SpecError)
    with pytest.raises(CatalogError, match="no such catalog file"):
        load_catalog(tmp_path / "missing.toml")
    with pytest.raises(CatalogError, match=r"not valid TOML \(.*line 1"):
        load_catalog(write(tmp_path, "[toy\n"))
    with pytest.raises(CatalogError, match="no job types"):
        load_catalog(write(tmp_path, "# nothing here\n"))
    with pytest.raises(CatalogError, match=r"\[toy\]: expected a table"):
        load_catalog(write(tmp_path, "toy = 3\n"))


def test_throughput_params_are_kept_as_written(toy):
    assert toy.throughput == ThroughputParams(0.02, 0.001, 0.01, 0.002, 0.05, 0.004, 1.5)


@pytest.mark.parametrize("num_gpus", [1, 4])
def test_each_catalog_entry_runs_about_as_long_as_its_measured_model(num_gpus):
    try:
        measured = load_measured_models(find_data_dir().path)
    except DataNotFoundError as err:
        pytest.skip(str(err))
    catalog = load_catalog()
    for name, model in measured.items():
        batch = max(model.init_batch_size, model.min_local_bsz * num_gpus)
        local_bsz = -(-batch // num_gpus)
        truth = run_time_s(model, (num_gpus,), local_bsz)
        guess = run_time_s(catalog[name], (num_gpus,), local_bsz)
        assert guess == pytest.approx(truth, rel=0.25), name


# ---- per GPU type: [name.gpu.<type>] ------------------------------------------------------------------------------

TYPED = (
    GOOD.replace('description = "a small job"', 'description = "a small job"\ngpu_type = "rtx"')
    + """
[toy.gpu.dgx-ext]
max_local_bsz = 1024

[toy.gpu.dgx-ext.throughput]
alpha_c = 0.01
beta_c = 0.0002
alpha_r = 0.005
beta_r = 0.001
alpha_n = 0.01
beta_n = 0.002
gamma = 2.0
"""
)


def test_a_new_gpu_type_is_described_by_numbers_alone(tmp_path):
    typed = load_typed_catalog(write(tmp_path, TYPED))["toy"]
    assert typed.gpu_types == ("rtx", "dgx-ext")
    rtx, a100 = typed.on("rtx"), typed.on("dgx-ext")
    assert rtx == load_catalog(write(tmp_path, TYPED))["toy"], "the top level is what load_catalog reads"
    assert rtx.step_time((1,), 64) == (0.02 + 0.001 * 64, 0.0)  # cached on rtx first: a100 must not share it
    assert a100.throughput == ThroughputParams(0.01, 0.0002, 0.005, 0.001, 0.01, 0.002, 2.0)
    assert a100.step_time((1,), 64) == pytest.approx((0.01 + 0.0002 * 64, 0.0))
    assert (a100.min_local_bsz, a100.max_local_bsz) == (16, 1024), "bounds not given are the top level's"
    for attribute in ("init_batch_size", "max_batch_size", "max_epochs", "progress_per_epoch", "noise_scale"):
        assert getattr(a100, attribute) == getattr(rtx, attribute)


def typed_replace(old: str, new: str) -> str:
    assert old in TYPED
    return TYPED.replace(old, new)


BAD_TYPED = [
    (typed_replace("max_local_bsz = 1024", "max_local_bsz = 8"), "gpu.dgx-ext.min_local_bsz", "> max_local_bsz = 8"),
    (typed_replace("max_local_bsz = 1024", "max_local_bsz = 0"), "gpu.dgx-ext.max_local_bsz", "positive integer"),
    (typed_replace("max_local_bsz = 1024", "memory_gb = 40"), "gpu.dgx-ext.memory_gb", "unknown field"),
    (typed_replace("gamma = 2.0", "gamma = 0.5"), "gpu.dgx-ext.throughput.gamma", "out of range"),
    (typed_replace("beta_n = 0.002\ngamma = 2.0", "gamma = 2.0"), "gpu.dgx-ext.throughput.beta_n", "missing field"),
    (typed_replace("[toy.gpu.dgx-ext]", "[toy.gpu.rtx]").replace("gpu.dgx-ext.", "gpu.rtx."), "gpu.rtx", "top-level"),
    (typed_replace('gpu_type = "rtx"', "gpu_type = 3"), "gpu_type", "not a GPU type name"),
    (GOOD.replace("max_epochs = 10", "max_epochs = 10\ngpu = 1"), "gpu", "expected tables"),
]


@pytest.mark.parametrize(("text", "field", "problem"), BAD_TYPED, ids=[f"{f}: {p}" for _, f, p in BAD_TYPED])
def test_a_bad_gpu_type_entry_names_file_type_and_field_for_both_loaders(tmp_path, text, field, problem):
    path = write(tmp_path, text)
    for loader in (load_catalog, load_typed_catalog):
        with pytest.raises(CatalogError) as caught:
            loader(path)
        message = str(caught.value)
        assert message.startswith(f"{path}: [toy] {field}")
        assert problem in message


SIA_TYPES = ("aws", "azure", "dgx", "dgx-ext", "quad", "rtx")


def test_the_shipped_catalog_describes_each_model_on_every_sia_type():
    typed = load_typed_catalog()
    plain = load_catalog()
    for name, model in typed.items():
        assert sorted(model.gpu_types) == sorted(SIA_TYPES), name
        assert model.on("aws") == plain[name]
    limits = {name: tuple(typed[name].on(t).max_local_bsz for t in ("aws", "rtx", "dgx-ext")) for name in typed}
    assert limits["imagenet"] == (200, 200, 800)
    assert limits["yolov3"] == (8, 8, 32), "aws keeps the Pollux artifact's cap at 8"
    imagenet = typed["imagenet"]
    t4, a100 = (imagenet.on(t).step_time((4,), 200)[0] for t in ("aws", "dgx-ext"))
    assert a100 < 0.6 * t4


@pytest.mark.parametrize("num_gpus", [1, 4])
def test_each_typed_catalog_entry_runs_within_a_factor_of_two_of_its_measured_model(num_gpus):
    from pollux.data import locate
    from pollux.sim.typed import load_sia_models

    if not locate.looks_like_data(locate.SIA_SHARED_DATA_DIR):
        pytest.skip(f"needs the real data at {locate.SIA_SHARED_DATA_DIR}")
    measured = load_sia_models(locate.SIA_SHARED_DATA_DIR)
    catalog = load_typed_catalog()
    for name, typed in measured.items():
        for gpu_type in SIA_TYPES:
            if gpu_type == "aws":
                continue  # the top level: Pollux's settings, checked above against the Pollux models
            model = typed.on(gpu_type)
            local_bsz = -(-max(model.init_batch_size, model.min_local_bsz * num_gpus) // num_gpus)
            truth = run_time_s(model, (num_gpus,), local_bsz)
            guess = run_time_s(catalog[name].on(gpu_type), (num_gpus,), local_bsz)
            assert 0.5 < guess / truth < 2.0, (name, gpu_type)

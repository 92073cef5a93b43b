"""Job models per GPU type: each type answers from its own profile; the Pollux artifact's models are unchanged."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pollux.data import locate
from pollux.data.profiles import MODELS, load_typed_profiles
from pollux.errors import DataNotFoundError, SpecError
from pollux.goodput import ThroughputParams
from pollux.sim.jobmodel import run_time_s
from pollux.sim.measured import MeasuredJobModel, load_measured_models
from pollux.sim.parametric import ParametricJobModel
from pollux.sim.typed import SIA_SETTINGS, TypedJobModel, load_typed_models

SIA_TYPES = ("aws", "azure", "dgx", "dgx-ext", "quad", "rtx")


def _load(source: str, root: Path) -> dict[str, TypedJobModel]:
    if not locate.looks_like_data(root):
        pytest.skip(f"needs the real data at {root}")
    try:
        return load_typed_models(source, root)  # type: ignore[arg-type]
    except DataNotFoundError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def sia() -> dict[str, TypedJobModel]:
    return _load("sia-sosp23", locate.SIA_SHARED_DATA_DIR)


@pytest.fixture(scope="module")
def pollux() -> dict[str, TypedJobModel]:
    return _load("pollux-osdi21", locate.SHARED_DATA_DIR)


def toy(name: str = "toy", max_local_bsz: int = 64, **changes: int) -> ParametricJobModel:
    fields = {
        "init_batch_size": 32,
        "max_batch_size": 1024,
        "min_local_bsz": 8,
        "max_local_bsz": max_local_bsz,
        "max_epochs": 10,
        **changes,
    }
    return ParametricJobModel(
        name=name,
        progress_per_epoch=100.0,
        throughput=ThroughputParams(0.01, 0.001, 0.01, 0.001, 0.02, 0.002, 1.0),
        noise_fraction=(0.0, 1.0),
        noise_scale=(100.0, 1000.0),
        **fields,
    )


# ---- the type itself ---------------------------------------------------------------------------------------------


def test_an_unknown_type_is_refused_naming_the_model_and_its_types():
    model = TypedJobModel("toy", {"aws": toy(), "rtx": toy(max_local_bsz=32)})
    assert model.gpu_types == ("aws", "rtx")
    assert model.on("rtx").max_local_bsz == 32
    with pytest.raises(SpecError, match="model 'toy' has no job model for GPU type 'h100'; profiled types: aws, rtx"):
        model.on("h100")


def test_types_of_one_model_must_share_its_batch_sizes_and_epochs():
    with pytest.raises(SpecError, match="init_batch_size = 64 on 'rtx' but 32 on 'aws'"):
        TypedJobModel("toy", {"aws": toy(), "rtx": toy(init_batch_size=64)})
    with pytest.raises(SpecError, match="max_epochs"):
        TypedJobModel("toy", {"aws": toy(), "rtx": toy(max_epochs=20)})
    with pytest.raises(SpecError, match="no GPU type"):
        TypedJobModel("toy", {})
    with pytest.raises(SpecError, match="progress_slowdown"):
        TypedJobModel("toy", {"aws": toy()}, progress_slowdown=0.0)


def test_the_types_cannot_be_changed_after_construction():
    types = {"aws": toy()}
    model = TypedJobModel("toy", types)
    types["rtx"] = toy()
    assert model.gpu_types == ("aws",)
    with pytest.raises(TypeError):
        model.by_type["rtx"] = toy()  # type: ignore[index]


# ---- the Pollux artifact: one type, the same numbers -------------------------------------------------------------


def test_pollux_models_are_the_measured_models_on_aws(pollux):
    measured = load_measured_models(locate.SHARED_DATA_DIR)
    assert set(pollux) == set(measured)
    placements = [(1,), (2,), (3,), (4,), (1, 1), (2, 2), (1, 4), (4, 4), (2, 3, 4), (4, 4, 4, 4), (1,) * 9, (4,) * 16]
    for name, typed in pollux.items():
        assert typed.gpu_types == ("aws",)
        assert (typed.progress_slowdown, typed.restore_delay_s) == (1.0, None)
        new, old = typed.on("aws"), measured[name]
        for attribute in ("init_batch_size", "max_batch_size", "min_local_bsz", "max_local_bsz", "max_epochs"):
            assert getattr(new, attribute) == getattr(old, attribute), (name, attribute)
        for placement, local_bsz in itertools.product(placements, range(old.min_local_bsz, old.max_local_bsz + 1, 3)):
            assert new.step_time(placement, local_bsz) == old.step_time(placement, local_bsz), (name, placement)
        for epoch in range(old.max_epochs):
            assert new.epoch_progress(epoch + 1) == old.epoch_progress(epoch + 1)
            for batch in (old.init_batch_size, old.max_batch_size // 3, old.max_batch_size):
                assert new.grad_stats(batch, epoch) == old.grad_stats(batch, epoch)


# ---- the Sia artifact: every profiled type, its own rows and memory --------------------------------------------


def test_sia_models_are_the_six_on_every_profiled_type_with_sias_settings(sia):
    assert tuple(sia) == tuple(SIA_SETTINGS) == MODELS
    for name, model in sia.items():
        assert model.gpu_types == SIA_TYPES, name
        assert model.progress_slowdown == {"cifar10": 1.8, "ncf": 1.5}.get(name, 1.2)
    assert {name: m.restore_delay_s for name, m in sia.items()} == {
        "bert": 120,
        "cifar10": 50,
        "deepspeech2": 25,
        "imagenet": 250,
        "ncf": 15,
        "yolov3": 80,
    }
    assert {name: m.max_epochs for name, m in sia.items()} == {
        "bert": 2,
        "cifar10": 100,
        "deepspeech2": 80,
        "imagenet": 90,
        "ncf": 10,
        "yolov3": 50,
    }


@pytest.mark.parametrize("name", MODELS)
def test_each_type_answers_its_own_measured_rows_exactly(sia, name):
    for gpu_type in SIA_TYPES:
        model = sia[name].on(gpu_type)
        assert isinstance(model, MeasuredJobModel)
        p = model.profile.placements
        for text, b, t, s in zip(p.placement, p.local_bsz, p.step_time, p.sync_time, strict=True):
            assert model.step_time(tuple(map(int, text)), int(b)) == (t, s), (gpu_type, text, b)


def test_per_type_memory_limits_are_the_largest_profiled_batch(sia):
    profiled = {
        name: {
            t: int(p.placements.local_bsz.max())
            for t, p in load_typed_profiles(name, locate.SIA_SHARED_DATA_DIR).items()
        }
        for name in MODELS
    }
    for name, model in sia.items():
        expected = {t: (profiled[name][t] if (name, t) != ("deepspeech2", "rtx") else 57) for t in SIA_TYPES}
        assert {t: bounds[1] for t, bounds in model.local_bsz_bounds_by_type.items()} == expected, name
    # docs/design.md, "Heterogeneous clusters": T4 / 2080Ti / A100
    limits = {name: tuple(sia[name].on(t).max_local_bsz for t in ("aws", "rtx", "dgx-ext")) for name in MODELS}
    assert limits["bert"] == (12, 12, 48)
    assert limits["cifar10"] == (1024, 1024, 4096)
    assert limits["imagenet"] == (200, 200, 800)
    assert limits["yolov3"] == (16, 8, 32)
    assert limits["deepspeech2"] == (80, 57, 320)  # Sia caps deepspeech2 at 57 on 2080Ti; its profile goes to 80


def test_statistics_and_batch_sizes_do_not_depend_on_the_type(sia):
    for model in sia.values():
        aws = model.on("aws")
        for gpu_type in SIA_TYPES:
            other = model.on(gpu_type)
            assert other.min_local_bsz == aws.min_local_bsz
            assert other.epoch_progress(model.max_epochs) == aws.epoch_progress(model.max_epochs)
            assert other.grad_stats(3 * model.init_batch_size, 0) == aws.grad_stats(3 * model.init_batch_size, 0)


@pytest.mark.parametrize(
    ("placement", "local_bsz"), [((1,), 81), ((1,), 200), ((4,), 163), ((2, 2), 115), ((4, 4), 200)]
)
def test_an_a100_is_faster_than_a_t4_for_imagenet_at_the_same_placement_and_batch(sia, placement, local_bsz):
    imagenet = sia["imagenet"]
    a100, t4 = (
        imagenet.on("dgx-ext").step_time(placement, local_bsz),
        imagenet.on("aws").step_time(placement, local_bsz),
    )
    assert a100[0] < 0.6 * t4[0]


def test_sia_aws_models_answer_as_the_pollux_ones_within_the_pollux_bounds(sia, pollux):
    for name in MODELS:
        old, new = pollux[name].on("aws"), sia[name].on("aws")
        for placement in [(1,), (4,), (1, 4), (4, 4, 4)]:
            assert new.step_time(placement, old.max_local_bsz) == old.step_time(placement, old.max_local_bsz)


def test_every_type_can_run_every_model_to_completion_on_one_and_many_gpus(sia):
    """Multi-node placements on `quad` (profiled on one node only) extrapolate with the fitted model."""
    for name, model in sia.items():
        for gpu_type in SIA_TYPES:
            job = model.on(gpu_type)
            for placement in [(1,), (2, 2), (4, 4, 4, 4)]:
                local_bsz = max(job.min_local_bsz, -(-job.init_batch_size // sum(placement)))
                hours = run_time_s(job, placement, min(local_bsz, job.max_local_bsz)) / 3600
                assert 0 < hours < 10_000, (name, gpu_type, placement)

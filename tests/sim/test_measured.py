"""The measured job model answers as the artifact's simulator: measured rows exactly, linear in between."""

import math

import numpy as np
import pytest

from pollux.data.locate import find_data_dir
from pollux.data.profiles import load_profile
from pollux.errors import DataNotFoundError, SpecError
from pollux.goodput import GradientStats
from pollux.sim.jobmodel import normalize_placement, run_time_s
from pollux.sim.measured import ARTIFACT_SETTINGS, MeasuredJobModel, load_measured_models


@pytest.fixture(scope="module")
def models() -> dict[str, MeasuredJobModel]:
    try:
        return load_measured_models(find_data_dir().path)
    except DataNotFoundError as err:
        pytest.skip(str(err))


def rows_of(model: MeasuredJobModel, placement: str) -> dict[int, tuple[float, float]]:
    p = model.profile.placements
    return {
        int(b): (float(t), float(s))
        for text, b, t, s in zip(p.placement, p.local_bsz, p.step_time, p.sync_time, strict=True)
        if text == placement
    }


def test_placements_are_normalized_by_dropping_empty_nodes_and_rotating():
    assert normalize_placement((4, 4, 1, 1)) == (1, 1, 4, 4)
    assert normalize_placement((0, 4, 0, 1, 1, 4)) == (1, 1, 4, 4)
    assert normalize_placement((4, 1, 4, 1)) == (1, 4, 1, 4)  # not a rotation of 1144: kept apart
    with pytest.raises(ValueError, match="no GPUs"):
        normalize_placement((0, 0))


def test_artifact_settings_are_applied(models):
    assert {name: m.max_epochs for name, m in models.items()} == {
        "bert": 2,
        "cifar10": 100,
        "deepspeech2": 80,
        "imagenet": 90,
        "ncf": 10,
        "yolov3": 50,
    }
    assert models["yolov3"].max_local_bsz == 8
    cifar10 = models["cifar10"]
    assert (cifar10.init_batch_size, cifar10.max_batch_size) == (128, 4096)
    assert (cifar10.min_local_bsz, cifar10.max_local_bsz) == (32, 1024)


@pytest.mark.parametrize("name", sorted(ARTIFACT_SETTINGS))
def test_every_measured_row_is_reproduced_exactly(models, name):
    model = models[name]
    p = model.profile.placements
    for text, b, t, s in zip(p.placement, p.local_bsz, p.step_time, p.sync_time, strict=True):
        assert model.step_time(tuple(map(int, text)), int(b)) == (t, s), (text, b)


def test_a_rotated_placement_reads_the_measured_row(models):
    model = models["cifar10"]
    measured = rows_of(model, "1144")
    assert measured, "cifar10 measures placement 1144"
    for local_bsz, expected in measured.items():
        assert model.step_time((4, 4, 1, 1), local_bsz) == expected
        assert model.step_time((1, 4, 4, 1), local_bsz) == expected
        assert model.step_time((0, 4, 0, 4, 1, 1), local_bsz) == expected


def test_between_two_measured_local_bsz_step_time_is_linear(models):
    model = models["imagenet"]
    measured = rows_of(model, "22")
    lo, hi = sorted(measured)[1:3]
    mid = (lo + hi) // 2
    assert lo < mid < hi
    w = (mid - lo) / (hi - lo)
    got = model.step_time((2, 2), mid)
    for k in range(2):
        assert got[k] == pytest.approx((1 - w) * measured[lo][k] + w * measured[hi][k], rel=1e-12)


def test_an_unmeasured_placement_lies_between_its_neighbours(models):
    """Six nodes of 4 GPUs are measured by counts only (scalability.csv); 5 nodes are not measured at all."""
    model = models["cifar10"]
    s = model.profile.scalability
    at = {
        (int(n), int(k), int(b)): float(t)
        for n, k, b, t in zip(s.num_nodes, s.num_replicas, s.local_bsz, s.step_time, strict=True)
    }
    assert model.step_time((4,) * 6, 64)[0] == pytest.approx(at[6, 24, 64], rel=1e-12)
    step_5x4, _ = model.step_time((4,) * 5, 64)
    four_nodes, _ = model.step_time((4,) * 4, 64)
    low, high = sorted((four_nodes, at[6, 24, 64]))
    assert low <= step_5x4 <= high


def test_outside_what_was_measured_the_answer_is_finite(models):
    """The artifact crashes there; we extrapolate with the throughput model fitted to the profile."""
    model = models["cifar10"]
    step_s, sync_s = model.step_time((4,) * 16, 1024)
    assert math.isfinite(step_s) and 0 <= sync_s < step_s


def test_grad_stats_at_a_measured_batch_size_and_epoch_equal_the_csv_row(models):
    model = models["cifar10"]
    for batch_size, run in model.profile.validation.items():
        for epoch in (0, 1, 37, 99):
            stats = model.grad_stats(batch_size, epoch)
            assert stats == GradientStats(sqr=float(run.grad_sqr[epoch]), var=float(run.grad_var[epoch]))


def test_grad_stats_between_measured_batch_sizes_are_linear_and_clipped_outside(models):
    model = models["cifar10"]
    lo, hi = model.profile.validation[256], model.profile.validation[512]
    stats = model.grad_stats(320, 5)
    w = (320 - 256) / (512 - 256)
    assert stats.sqr == pytest.approx((1 - w) * lo.grad_sqr[5] + w * hi.grad_sqr[5], rel=1e-12)
    assert stats.var == pytest.approx((1 - w) * lo.grad_var[5] + w * hi.grad_var[5], rel=1e-12)
    assert model.grad_stats(64, 5) == model.grad_stats(128, 5)
    assert model.grad_stats(10**6, 5) == model.grad_stats(4096, 5)
    with pytest.raises(ValueError, match="epoch"):
        model.grad_stats(128, 100)


def test_epoch_progress_is_the_least_any_validation_run_needed(models):
    for model in models.values():
        runs = list(model.profile.validation.values())
        assert model.epoch_progress(0) == 0.0
        for epoch in (1, model.max_epochs // 2, model.max_epochs):
            if epoch:
                assert model.epoch_progress(epoch) == min(float(r.progress[epoch - 1]) for r in runs)
        steps = np.diff([model.epoch_progress(e) for e in range(model.max_epochs + 1)])
        assert np.all(steps > 0)


def test_more_epochs_than_measured_are_refused():
    try:
        profile = load_profile("bert", find_data_dir().path)
    except DataNotFoundError as err:
        pytest.skip(str(err))
    with pytest.raises(SpecError, match="max_epochs = 3"):
        MeasuredJobModel.from_profile(profile, max_epochs=3)


def test_run_time_at_m0_on_one_gpu_is_total_progress_times_step_time(models):
    model = models["cifar10"]
    step_s, _ = model.step_time((1,), 128)
    assert run_time_s(model, (1,), 128) == pytest.approx(model.epoch_progress(100) * step_s, rel=1e-12)

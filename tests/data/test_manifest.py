"""The committed manifest describes the data exactly, maps it to its origin, and regenerates byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pollux.data.fetch import default_base_url
from pollux.data.locate import REPO_ROOT, sia_scale_dir
from pollux.data.manifest import (
    DERIVATIONS,
    derive_anchor_jcts,
    load_manifest,
    manifest_from_json,
    manifest_to_json,
    origin_path_for,
)
from pollux.errors import DataIntegrityError

MANIFEST_FILE = REPO_ROOT / "pollux" / "data" / "manifest.json"
SIA_MANIFEST_FILE = REPO_ROOT / "pollux" / "data" / "manifest-sia-sosp23.json"


def test_manifest_lists_every_data_file_and_nothing_else(shared_data: Path) -> None:
    on_disk = {p.relative_to(shared_data).as_posix() for p in shared_data.rglob("*") if p.is_file()}
    assert {e.path for e in load_manifest().files} == on_disk


def test_manifest_is_sorted_and_every_file_is_fetchable() -> None:
    manifest = load_manifest()
    paths = [e.path for e in manifest.files]
    assert paths == sorted(paths)
    assert len(paths) == len(set(paths))
    assert all(e.origin is not None for e in manifest.files)
    assert manifest.commit == "c793c7089bd307462686339d29707925c461f9a9"


def test_regenerating_the_manifest_changes_nothing(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "manifest.json"
    script = REPO_ROOT / "scripts" / "make_manifest.py"
    done = subprocess.run(
        [sys.executable, str(script), "--data-dir", str(shared_data), "--output", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == MANIFEST_FILE.read_bytes()


def test_manifest_text_round_trips() -> None:
    manifest = load_manifest()
    assert manifest_from_json(manifest_to_json(manifest)) == manifest


@pytest.mark.parametrize(
    ("local", "origin", "derive"),
    [
        ("profiles/bert/placements.csv", "traces/bert/placements.csv", None),
        ("profiles/ncf/validation-32768.csv", "traces/ncf/validation-32768.csv", None),
        ("workloads/workloads/workload-1.csv", "workloads/workload-1.csv", None),
        ("workloads/workloads-realistic/workload-4.csv", "workloads-realistic/workload-4.csv", None),
        ("philly-jobs.csv", "traces/philly.csv", None),
        (
            "anchor-results/results-jobload/pollux-1.0/jcts.json",
            "results-jobload/pollux-1.0/summary.json",
            "anchor-jcts",
        ),
        ("notes.txt", None, None),
    ],
)
def test_local_paths_map_to_the_origin_layout(local: str, origin: str | None, derive: str | None) -> None:
    assert origin_path_for(local) == (origin, derive)


def test_anchor_derivation_keeps_workloads_1_to_4_sorted_with_indent_1() -> None:
    summary = {
        "jcts": {f"workload-{i}": {"ncf-1": 10 * i, "bert-0": i} for i in (2, 7, 4, 1, 3, 5)},
        "avgs": {"workload-1": 1.0},
        "mean": 2.0,
    }
    derived = derive_anchor_jcts(json.dumps(summary, indent=4).encode())
    expected = {"jcts": {f"workload-{i}": {"bert-0": i, "ncf-1": 10 * i} for i in (1, 2, 3, 4)}}
    assert derived == json.dumps(expected, indent=1, sort_keys=True).encode()
    assert "anchor-jcts" in DERIVATIONS


def test_anchor_files_are_fixed_points_of_their_derivation(shared_data: Path) -> None:
    """What makes them fetchable: the origin's summary.json carries the same `jcts` mapping."""
    for entry in load_manifest().files:
        if entry.derive is not None:
            content = (shared_data / entry.path).read_bytes()
            assert DERIVATIONS[entry.derive](content) == content, entry.path


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"files": []}',
        '{"origin": {"repository": "r", "commit": "c", "folder": "f"}, "files": [{"path": "a"}]}',
    ],
)
def test_malformed_manifest_is_refused(text: str) -> None:
    with pytest.raises(DataIntegrityError, match="malformed manifest"):
        manifest_from_json(text)


def test_manifest_with_unknown_derivation_is_refused() -> None:
    entry = {"path": "a", "origin": "b", "derive": "magic", "sha256": "0" * 64, "size": 1}
    text = json.dumps({"origin": {"repository": "r", "commit": "c", "folder": "f"}, "files": [entry]})
    with pytest.raises(DataIntegrityError, match="unknown derivation"):
        manifest_from_json(text)


# ---- the Sia artifact's manifest --------------------------------------------------------------------------------


def test_sia_manifest_lists_every_sia_data_file_and_names_its_origin(sia_shared_data: Path) -> None:
    on_disk = {p.relative_to(sia_shared_data).as_posix() for p in sia_shared_data.rglob("*") if p.is_file()}
    scale = sia_scale_dir(sia_shared_data)
    on_disk |= {f"workloads/scale/{p.relative_to(scale).as_posix()}" for p in scale.rglob("*") if p.is_file()}
    manifest = load_manifest("sia-sosp23")
    assert {e.path for e in manifest.files} == on_disk
    assert (manifest.repository, manifest.commit, manifest.folder) == (
        "https://github.com/siasosp23/artifacts",
        "aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70",
        "sia-simulator/",
    )
    assert all(e.origin is not None and e.derive is None for e in manifest.files)


def test_sia_manifest_lists_the_scale_and_rate_workloads_at_their_public_origin() -> None:
    """Figures 7 and 9's workloads: ten each of rate_10 … rate_50 and scale_2x … scale_32x, fetched from the pinned
    commit's `sia-simulator/workloads/scale/`."""
    scale = [e for e in load_manifest("sia-sosp23").files if e.path.startswith("workloads/scale/")]
    sets = [*(f"rate_{r}" for r in (10, 20, 30, 40, 50)), *(f"scale_{k}x" for k in (2, 4, 8, 16, 32))]
    assert {e.path for e in scale} == {f"workloads/scale/{s}/workload-{n}.csv" for s in sets for n in range(1, 11)}
    base = "https://raw.githubusercontent.com/siasosp23/artifacts/aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70/"
    for entry in scale:
        assert default_base_url("sia-sosp23") + str(entry.origin) == base + "sia-simulator/" + entry.path
        assert len(entry.sha256) == 64 and entry.size > 0


def test_sia_aws_profiles_are_the_pollux_ones() -> None:
    """Sia's `aws` files are byte-identical to the Pollux artifact's T4 profiles, and say so through their sums."""
    pollux = {e.path: e.sha256 for e in load_manifest().files}
    sia = {e.path: e.sha256 for e in load_manifest("sia-sosp23").files}
    for model in ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"):
        for kind in ("placements", "scalability"):
            assert sia[f"profiles/{model}/{kind}-aws.csv"] == pollux[f"profiles/{model}/{kind}.csv"]


def test_regenerating_the_sia_manifest_changes_nothing(sia_shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "manifest-sia-sosp23.json"
    script = REPO_ROOT / "scripts" / "make_manifest.py"
    done = subprocess.run(
        [sys.executable, str(script), "--artifact", "sia-sosp23", "--data-dir", str(sia_shared_data), "--output", out],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == SIA_MANIFEST_FILE.read_bytes()


@pytest.mark.parametrize(
    ("local", "origin"),
    [
        ("profiles/bert/placements-rtx.csv", "traces/bert/placements-rtx.csv"),
        ("profiles/gpt_pmp/validation-12.csv", "traces/gpt_pmp/validation-12.csv"),
        ("workloads/philly/workload-3.csv", "workloads/philly/workload-3.csv"),
        ("workloads/saturn/workload-10.csv", "workloads/saturn/workload-10.csv"),
        ("workloads/scale/rate_30/workload-4.csv", "workloads/scale/rate_30/workload-4.csv"),
        ("workloads/scale/scale_32x/workload-1.csv", "workloads/scale/scale_32x/workload-1.csv"),
        ("workloads/scale/workload-1.csv", None),
        ("philly-jobs.csv", None),
        ("profiles/bert", None),
    ],
)
def test_sia_local_paths_map_to_its_origin_layout(local: str, origin: str | None) -> None:
    assert origin_path_for(local, "sia-sosp23") == (origin, None)

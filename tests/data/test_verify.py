"""verify() reports exactly which manifest files are missing or differ."""

from __future__ import annotations

import shutil
from pathlib import Path

from pollux.data.manifest import load_manifest
from pollux.data.verify import verify

SOME = ("philly-jobs.csv", "profiles/cifar10/placements.csv", "workloads/workloads/workload-1.csv")


def test_the_real_data_verifies(shared_data: Path) -> None:
    report = verify(shared_data)
    assert report.ok
    assert report.checked == len(load_manifest().files)


def test_missing_and_altered_files_are_reported_by_path(shared_data: Path, tmp_path: Path) -> None:
    manifest = load_manifest().subset(set(SOME))
    for path in SOME[1:]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared_data / path, tmp_path / path)
    altered = tmp_path / SOME[2]
    altered.write_bytes(altered.read_bytes().replace(b"cifar10", b"cifar11", 1))

    report = verify(tmp_path, manifest)

    assert not report.ok
    assert report.missing == (SOME[0],)
    assert report.mismatched == (SOME[2],)
    assert report.checked == 1
    assert "1 missing: philly-jobs.csv" in report.summary()
    assert "1 mismatched: workloads/workloads/workload-1.csv" in report.summary()


def test_an_empty_folder_has_everything_missing(tmp_path: Path) -> None:
    report = verify(tmp_path)
    assert not report.ok
    assert len(report.missing) == len(load_manifest().files)


def test_the_real_sia_data_verifies_against_its_own_manifest(sia_shared_data: Path) -> None:
    report = verify(sia_shared_data, artifact="sia-sosp23")
    assert report.ok
    assert report.checked == len(load_manifest("sia-sosp23").files) == 252


def test_one_changed_byte_of_a_sia_profile_fails_verification(sia_shared_data: Path, tmp_path: Path) -> None:
    changed = "profiles/imagenet/placements-dgx-ext.csv"
    manifest = load_manifest("sia-sosp23").subset({changed, "workloads/saturn/workload-7.csv"})
    for entry in manifest.files:
        (tmp_path / entry.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sia_shared_data / entry.path, tmp_path / entry.path)
    assert verify(tmp_path, manifest).ok
    data = bytearray((tmp_path / changed).read_bytes())
    data[-3] = ord("7") if data[-3] != ord("7") else ord("8")  # one digit of the last row, same size
    (tmp_path / changed).write_bytes(bytes(data))

    report = verify(tmp_path, manifest)

    assert not report.ok
    assert report.mismatched == (changed,)
    assert report.checked == 1

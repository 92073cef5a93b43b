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

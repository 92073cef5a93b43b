"""fetch() against a loopback origin: fills the cache, skips what it has, refuses bad bytes, leaves no debris."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pollux.data.fetch import fetch
from pollux.data.locate import default_cache_dir, find_data_dir
from pollux.data.manifest import load_manifest
from pollux.data.verify import verify
from pollux.errors import DataIntegrityError, DataNotFoundError


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def assert_only_verified_files(dest: Path) -> None:
    """Every file in `dest` is a manifest file with the right bytes: no temporary, partial or corrupt file."""
    manifest = load_manifest()
    present = files_under(dest) if dest.exists() else set()
    assert present <= {e.path for e in manifest.files}, present - {e.path for e in manifest.files}
    assert not verify(dest, manifest.subset(present)).mismatched


@pytest.mark.usefixtures("no_shared")
def test_fetch_fills_an_empty_cache_that_then_verifies_and_is_found(origin_server: tuple[str, list[str]]) -> None:
    base_url, _ = origin_server
    dest = fetch(base_url=base_url, progress=False)
    assert dest == default_cache_dir()
    assert verify(dest).ok
    assert files_under(dest) == {e.path for e in load_manifest().files}
    assert find_data_dir().source == "cache"


def test_second_fetch_downloads_nothing(origin_server: tuple[str, list[str]], tmp_path: Path) -> None:
    base_url, requests = origin_server
    fetch(tmp_path / "data", base_url=base_url, progress=False)
    assert len(requests) == len(load_manifest().files)
    requests.clear()
    fetch(tmp_path / "data", base_url=base_url, progress=False)
    assert requests == []


def test_a_damaged_cached_file_is_downloaded_again(origin_server: tuple[str, list[str]], tmp_path: Path) -> None:
    base_url, requests = origin_server
    dest = fetch(tmp_path / "data", base_url=base_url, progress=False)
    (dest / "profiles/bert/scalability.csv").write_text("garbage")
    requests.clear()
    fetch(dest, base_url=base_url, progress=False)
    assert requests == ["/traces/bert/scalability.csv"]
    assert verify(dest).ok


def test_base_url_without_trailing_slash_works(origin_server: tuple[str, list[str]], tmp_path: Path) -> None:
    base_url, _ = origin_server
    manifest = load_manifest().subset({"profiles/yolov3/validation-8.csv"})
    dest = fetch(tmp_path / "data", base_url=base_url.rstrip("/"), progress=False, manifest=manifest)
    assert verify(dest, manifest).ok


@pytest.fixture
def tampered_origin(origin_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "tampered"
    shutil.copytree(origin_dir, copy)
    return copy


def test_a_corrupted_served_file_is_refused_by_name_and_leaves_nothing(
    tampered_origin: Path, serve_dir, tmp_path: Path
) -> None:
    served = tampered_origin / "traces/bert/placements.csv"
    data = bytearray(served.read_bytes())
    data[100] ^= 1  # one flipped bit, same size
    served.write_bytes(bytes(data))
    dest = tmp_path / "data"
    with serve_dir(tampered_origin) as (base_url, _), pytest.raises(DataIntegrityError) as err:
        fetch(dest, base_url=base_url, progress=False)
    assert "profiles/bert/placements.csv" in str(err.value)
    assert "\n" not in str(err.value)
    assert not (dest / "profiles/bert/placements.csv").exists()
    assert not (dest / "profiles").exists(), "folders created for the refused file are removed"
    assert files_under(dest), "files verified before the bad one stay"
    assert_only_verified_files(dest)


def test_a_corrupted_anchor_result_is_refused_by_name(tampered_origin: Path, serve_dir, tmp_path: Path) -> None:
    served = tampered_origin / "results-jobload/tiresias-1.0/summary.json"
    summary = json.loads(served.read_bytes())
    first_job = next(iter(summary["jcts"]["workload-3"]))
    summary["jcts"]["workload-3"][first_job] += 1
    served.write_text(json.dumps(summary, indent=4))
    (tampered_origin / "results-period/pollux-2m/summary.json").write_text("<html>not json</html>")
    manifest = load_manifest()
    for bad, local in [
        ("tiresias-1.0", "anchor-results/results-jobload/tiresias-1.0/jcts.json"),
        ("pollux-2m", "anchor-results/results-period/pollux-2m/jcts.json"),
    ]:
        with serve_dir(tampered_origin) as (base_url, _), pytest.raises(DataIntegrityError, match=local):
            fetch(tmp_path / bad, base_url=base_url, progress=False, manifest=manifest.subset({local}))
        assert not (tmp_path / bad).exists()


def test_a_file_missing_at_the_mirror_is_named_with_the_way_out(
    tampered_origin: Path, serve_dir, tmp_path: Path
) -> None:
    (tampered_origin / "traces/philly.csv").unlink()
    manifest = load_manifest().subset({"philly-jobs.csv", "profiles/ncf/placements.csv"})
    with serve_dir(tampered_origin) as (base_url, _), pytest.raises(DataNotFoundError) as err:
        fetch(tmp_path / "data", base_url=base_url, progress=False, manifest=manifest)
    message = str(err.value)
    assert "traces/philly.csv" in message
    assert "HTTP 404" in message
    assert "POLLUX_DATA_DIR" in message
    assert "pollux data fetch --base-url" in message
    assert_only_verified_files(tmp_path / "data")


def test_an_unreachable_origin_is_one_line_naming_env_and_base_url(closed_port_url: str, tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError) as err:
        fetch(tmp_path / "data", base_url=closed_port_url, progress=False)
    message = str(err.value)
    assert "\n" not in message
    assert "POLLUX_DATA_DIR" in message
    assert "pollux data fetch --base-url" in message
    assert not (tmp_path / "data").exists()


# ---- the Sia artifact: its own origin, manifest and cache -------------------------------------------------------


@pytest.mark.usefixtures("no_shared")
def test_fetch_of_the_sia_artifact_fills_its_cache_that_then_verifies_and_is_found(
    sia_origin_server: tuple[str, list[str]],
) -> None:
    base_url, requests = sia_origin_server
    dest = fetch(base_url=base_url, progress=False, artifact="sia-sosp23")
    assert dest == default_cache_dir("sia-sosp23")
    assert verify(dest, artifact="sia-sosp23").ok
    assert files_under(dest) == {e.path for e in load_manifest("sia-sosp23").files}
    assert "/traces/imagenet/placements-dgx-ext.csv" in requests
    assert "/workloads/saturn/workload-7.csv" in requests
    assert find_data_dir(artifact="sia-sosp23").source == "cache"


def test_a_corrupted_sia_file_is_refused_by_name(sia_origin_dir: Path, serve_dir, tmp_path: Path) -> None:
    tampered = tmp_path / "tampered"
    shutil.copytree(sia_origin_dir, tampered)
    served = tampered / "traces/yolov3/placements-rtx.csv"
    data = bytearray(served.read_bytes())
    data[60] ^= 1
    served.write_bytes(bytes(data))
    manifest = load_manifest("sia-sosp23").subset({"profiles/yolov3/placements-rtx.csv"})
    with serve_dir(tampered) as (base_url, _), pytest.raises(DataIntegrityError, match=r"placements-rtx\.csv"):
        fetch(tmp_path / "data", base_url=base_url, progress=False, manifest=manifest, artifact="sia-sosp23")
    assert not (tmp_path / "data").exists()


def test_the_sia_origin_is_its_pinned_raw_github_folder() -> None:
    from pollux.data.fetch import DEFAULT_BASE_URL, default_base_url

    assert default_base_url() == DEFAULT_BASE_URL
    assert default_base_url("sia-sosp23") == (
        "https://raw.githubusercontent.com/siasosp23/artifacts/aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70/sia-simulator/"
    )


def test_an_unreachable_sia_origin_names_its_variable(closed_port_url: str, tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError) as err:
        fetch(tmp_path / "data", base_url=closed_port_url, progress=False, artifact="sia-sosp23")
    assert "POLLUX_SIA_DATA_DIR" in str(err.value)
    assert "pollux data fetch --artifact sia-sosp23 --base-url" in str(err.value)

"""Where the data is found: --data-dir > POLLUX_DATA_DIR > ../shared/data > user cache, else one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pollux.data import locate
from pollux.data.locate import data_file, data_files, default_cache_dir, find_data_dir
from pollux.errors import DataNotFoundError


def make_data(path: Path) -> Path:
    (path / "profiles").mkdir(parents=True)
    return path


@pytest.fixture
def everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A data folder at every place the search looks."""
    places = {
        "explicit": make_data(tmp_path / "explicit"),
        "env": make_data(tmp_path / "env"),
        "shared": make_data(tmp_path / "shared" / "pollux-osdi21"),
        "cache": make_data(default_cache_dir()),
    }
    monkeypatch.setenv("POLLUX_DATA_DIR", str(places["env"]))
    monkeypatch.setattr(locate, "SHARED_DATA_DIR", places["shared"])
    return places


def test_explicit_dir_wins_over_env_shared_and_cache(everywhere: dict[str, Path]) -> None:
    found = find_data_dir(everywhere["explicit"])
    assert (found.path, found.source) == (everywhere["explicit"].resolve(), "--data-dir")


def test_env_dir_wins_over_shared_and_cache(everywhere: dict[str, Path]) -> None:
    found = find_data_dir()
    assert (found.path, found.source) == (everywhere["env"].resolve(), "POLLUX_DATA_DIR")


def test_shared_dir_wins_over_cache(everywhere: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POLLUX_DATA_DIR")
    found = find_data_dir()
    assert (found.path, found.source) == (everywhere["shared"].resolve(), "shared")


def test_cache_is_the_last_resort(everywhere: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POLLUX_DATA_DIR")
    monkeypatch.setattr(locate, "SHARED_DATA_DIR", everywhere["shared"].parent / "absent")
    found = find_data_dir()
    assert (found.path, found.source) == (everywhere["cache"].resolve(), "cache")


def test_shared_folder_without_profiles_is_skipped(
    everywhere: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POLLUX_DATA_DIR")
    (everywhere["shared"] / "profiles").rmdir()
    assert find_data_dir().source == "cache"


def test_the_real_shared_data_is_found_by_default(shared_data: Path) -> None:
    found = find_data_dir()
    assert (found.path, found.source) == (shared_data.resolve(), "shared")


def test_cache_root_follows_pollux_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLLUX_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert default_cache_dir() == tmp_path / "elsewhere" / "pollux-osdi21"


def test_cache_defaults_to_dot_cache_in_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POLLUX_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "pollux" / "pollux-osdi21"


def test_missing_explicit_dir_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match=r"--data-dir .*nowhere.* does not exist"):
        find_data_dir(tmp_path / "nowhere")


def test_missing_env_dir_is_named_even_when_shared_exists(
    everywhere: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("POLLUX_DATA_DIR", str(tmp_path / "typo"))
    with pytest.raises(DataNotFoundError, match=r"POLLUX_DATA_DIR .*typo.* does not exist"):
        find_data_dir()


def test_explicit_dir_that_is_not_the_data_says_where_to_point(tmp_path: Path) -> None:
    (tmp_path / "parent" / "pollux-osdi21" / "profiles").mkdir(parents=True)
    with pytest.raises(DataNotFoundError, match="has no profiles/ folder"):
        find_data_dir(tmp_path / "parent")


@pytest.mark.usefixtures("no_shared")
def test_nothing_found_is_one_line_naming_the_env_var_and_the_fetch_command() -> None:
    with pytest.raises(DataNotFoundError) as err:
        find_data_dir()
    message = str(err.value)
    assert "\n" not in message
    assert "POLLUX_DATA_DIR" in message
    assert "pollux data fetch" in message


# ---- the Sia artifact: the same rules, its own variable, shared folder and cache ---------------------------------


@pytest.fixture
def sia_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A Sia data folder at every place the search looks, and a Pollux one where Pollux's variable points."""
    places = {
        "explicit": make_data(tmp_path / "sia-explicit"),
        "env": make_data(tmp_path / "sia-env"),
        "shared": make_data(tmp_path / "shared" / "sia-sosp23"),
        "cache": make_data(default_cache_dir("sia-sosp23")),
    }
    monkeypatch.setenv("POLLUX_SIA_DATA_DIR", str(places["env"]))
    monkeypatch.setenv("POLLUX_DATA_DIR", str(make_data(tmp_path / "pollux-env")))
    monkeypatch.setattr(locate, "SIA_SHARED_DATA_DIR", places["shared"])
    return places


def test_sia_data_is_found_in_the_same_order_by_its_own_variable(
    sia_everywhere: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    found = find_data_dir(sia_everywhere["explicit"], "sia-sosp23")
    assert (found.path, found.source) == (sia_everywhere["explicit"].resolve(), "--data-dir")
    found = find_data_dir(artifact="sia-sosp23")
    assert (found.path, found.source) == (sia_everywhere["env"].resolve(), "POLLUX_SIA_DATA_DIR")
    monkeypatch.delenv("POLLUX_SIA_DATA_DIR")
    found = find_data_dir(artifact="sia-sosp23")
    assert (found.path, found.source) == (sia_everywhere["shared"].resolve(), "shared")
    monkeypatch.setattr(locate, "SIA_SHARED_DATA_DIR", sia_everywhere["shared"].parent / "absent")
    found = find_data_dir(artifact="sia-sosp23")
    assert (found.path, found.source) == (sia_everywhere["cache"].resolve(), "cache")


def test_the_sia_cache_sits_beside_the_pollux_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLLUX_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert default_cache_dir("sia-sosp23") == tmp_path / "elsewhere" / "sia-sosp23"


def test_the_real_sia_data_is_found_by_default(sia_shared_data: Path) -> None:
    found = find_data_dir(artifact="sia-sosp23")
    assert (found.path, found.source) == (sia_shared_data.resolve(), "shared")


@pytest.mark.usefixtures("no_shared")
def test_no_sia_data_is_one_line_naming_its_variable_and_fetch_command() -> None:
    with pytest.raises(DataNotFoundError) as err:
        find_data_dir(artifact="sia-sosp23")
    message = str(err.value)
    assert "\n" not in message
    assert "POLLUX_SIA_DATA_DIR" in message
    assert "pollux data fetch --artifact sia-sosp23" in message


def test_an_unknown_artifact_lists_the_known_ones() -> None:
    with pytest.raises(DataNotFoundError, match="unknown artifact 'gavel'; known: pollux-osdi21, sia-sosp23"):
        find_data_dir(artifact="gavel")  # type: ignore[arg-type]


# ---- the Sia artifact's scale and rate workloads: inside its folder, or beside it as ../shared/data keeps them ------


def test_scale_workloads_are_read_inside_the_sia_folder_first_then_beside_it(tmp_path: Path) -> None:
    root = make_data(tmp_path / "sia-sosp23")
    relative = "workloads/scale/scale_2x/workload-1.csv"
    assert data_file(root, relative) == root / relative  # nowhere yet: where a fetch puts it
    beside = tmp_path / "sia-sosp23-scale" / "workloads" / "scale_2x" / "workload-1.csv"
    beside.parent.mkdir(parents=True)
    beside.write_text("beside")
    assert data_file(root, relative) == beside
    assert data_files(root, "sia-sosp23")[relative] == beside
    assert relative not in data_files(root, "pollux-osdi21")  # the Pollux artifact has no scale workloads
    (root / relative).parent.mkdir(parents=True)
    (root / relative).write_text("inside")
    assert data_file(root, relative) == root / relative
    assert data_file(root, "workloads/philly/workload-1.csv") == root / "workloads/philly/workload-1.csv"


def test_the_real_scale_workloads_are_found_beside_the_shared_sia_data(sia_shared_data: Path) -> None:
    found = data_file(find_data_dir(artifact="sia-sosp23").path, "workloads/scale/scale_32x/workload-1.csv")
    assert found.is_file()
    assert found.read_text().startswith("name,time,application,num_replicas,batch_size\n")

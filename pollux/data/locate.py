"""Find the artifact's data folder at run time (docs/design.md, section Data).

The project never ships the data; it looks, in this order, at `--data-dir`, `$POLLUX_DATA_DIR`, the
`../shared/data/pollux-osdi21` folder beside the repository (development and CI), and the user cache that
`pollux data fetch` fills.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pollux.errors import DataNotFoundError

DATASET = "pollux-osdi21"
DATA_DIR_ENV = "POLLUX_DATA_DIR"
CACHE_DIR_ENV = "POLLUX_CACHE_DIR"

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA_DIR = REPO_ROOT.parent / "shared" / "data" / DATASET

FETCH_HINT = f"set {DATA_DIR_ENV}=/path/to/{DATASET} or run `pollux data fetch`"


@dataclass(frozen=True)
class DataLocation:
    """Where the data was found, and which rule found it (shown by `pollux data status`)."""

    path: Path
    source: str  # "--data-dir" | "POLLUX_DATA_DIR" | "shared" | "cache"


def cache_root() -> Path:
    """The user cache root: `$POLLUX_CACHE_DIR`, else `$XDG_CACHE_HOME/pollux`, else `~/.cache/pollux`."""
    if override := os.environ.get(CACHE_DIR_ENV):
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pollux"


def default_cache_dir() -> Path:
    """Where `pollux data fetch` puts the data unless told otherwise."""
    return cache_root() / DATASET


def looks_like_data(path: Path) -> bool:
    """A folder holding the artifact has `profiles/`; checking that avoids picking up an empty shell."""
    return (path / "profiles").is_dir()


def _given_dir(path: Path, source: str) -> DataLocation:
    """A folder the user named must exist: silently falling back elsewhere would hide their mistake."""
    path = path.expanduser()
    if not path.is_dir():
        raise DataNotFoundError(f"{source} {path} does not exist or is not a folder; {FETCH_HINT}")
    if not looks_like_data(path):
        raise DataNotFoundError(
            f"{source} {path} has no profiles/ folder: point it at the {DATASET} folder itself; {FETCH_HINT}"
        )
    return DataLocation(path=path.resolve(), source=source)


def find_data_dir(data_dir: Path | None = None) -> DataLocation:
    """Resolve the data folder: explicit argument > `$POLLUX_DATA_DIR` > shared folder > user cache."""
    if data_dir is not None:
        return _given_dir(Path(data_dir), "--data-dir")
    if env_dir := os.environ.get(DATA_DIR_ENV):
        return _given_dir(Path(env_dir), DATA_DIR_ENV)
    if looks_like_data(SHARED_DATA_DIR):
        return DataLocation(path=SHARED_DATA_DIR.resolve(), source="shared")
    cache_dir = default_cache_dir()
    if looks_like_data(cache_dir):
        return DataLocation(path=cache_dir.resolve(), source="cache")
    raise DataNotFoundError(f"Pollux data not found (looked in {SHARED_DATA_DIR} and {cache_dir}); {FETCH_HINT}")

"""Find an artifact's data folder at run time (docs/design.md, section Data).

The project never ships the data. Two artifacts are read: the Pollux OSDI'21 one (`pollux-osdi21`: profiles on T4
GPUs, workloads, published results) and the Sia SOSP'23 one (`sia-sosp23`: the same jobs profiled on six GPU types,
Philly and Helios workloads). For each it looks, in this order, at the folder given explicitly (`--data-dir`), its
environment variable (`$POLLUX_DATA_DIR`, `$POLLUX_SIA_DATA_DIR`), the `../shared/data/<artifact>` folder beside the
repository (development and CI), and the user cache that `pollux data fetch` fills.

The Sia artifact's scale and arrival-rate workloads (its origin's `workloads/scale/`, Figures 7 and 9) belong to
`sia-sosp23` under `workloads/scale/`; `../shared/data` keeps them, for now, in a folder of their own beside it
(`sia-sosp23-scale/workloads/`), which `sia_scale_dir` reads where the data folder lacks them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from pollux.errors import DataNotFoundError

Artifact = Literal["pollux-osdi21", "sia-sosp23"]
ARTIFACTS: tuple[Artifact, ...] = get_args(Artifact)

DATASET: Artifact = "pollux-osdi21"  # the default artifact, what every caller without an `artifact` argument reads
SIA_DATASET: Artifact = "sia-sosp23"

DATA_DIR_ENV = "POLLUX_DATA_DIR"
SIA_DATA_DIR_ENV = "POLLUX_SIA_DATA_DIR"
CACHE_DIR_ENV = "POLLUX_CACHE_DIR"
DATA_DIR_ENVS: dict[Artifact, str] = {DATASET: DATA_DIR_ENV, SIA_DATASET: SIA_DATA_DIR_ENV}

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA_DIR = REPO_ROOT.parent / "shared" / "data" / DATASET
SIA_SHARED_DATA_DIR = REPO_ROOT.parent / "shared" / "data" / SIA_DATASET

SIA_SCALE_FOLDER = "workloads/scale"  # the Sia artifact's scale and rate workloads, inside its data folder
SIA_SCALE_SIBLING = Path("sia-sosp23-scale") / "workloads"  # where ../shared/data keeps them: beside the folder

FETCH_HINT = f"set {DATA_DIR_ENV}=/path/to/{DATASET} or run `pollux data fetch`"


@dataclass(frozen=True)
class DataLocation:
    """Where the data was found, and which rule found it (shown by `pollux data status`)."""

    path: Path
    source: str  # "--data-dir" | "POLLUX_DATA_DIR" | "POLLUX_SIA_DATA_DIR" | "shared" | "cache"


def check_artifact(artifact: str) -> Artifact:
    """`artifact` as a known name, or a `DataNotFoundError` listing the known ones."""
    if artifact not in ARTIFACTS:
        raise DataNotFoundError(f"unknown artifact {artifact!r}; known: {', '.join(ARTIFACTS)}")
    return artifact


def fetch_hint(artifact: Artifact = DATASET) -> str:
    """What to do when `artifact`'s data is nowhere: its environment variable, or the fetch command."""
    command = "pollux data fetch" if artifact == DATASET else f"pollux data fetch --artifact {artifact}"
    return f"set {DATA_DIR_ENVS[artifact]}=/path/to/{artifact} or run `{command}`"


def shared_data_dir(artifact: Artifact = DATASET) -> Path:
    """`../shared/data/<artifact>` beside the repository; read from the module's names at each call, so tests can
    point them elsewhere."""
    return SHARED_DATA_DIR if artifact == DATASET else SIA_SHARED_DATA_DIR


def cache_root() -> Path:
    """The user cache root: `$POLLUX_CACHE_DIR`, else `$XDG_CACHE_HOME/pollux`, else `~/.cache/pollux`."""
    if override := os.environ.get(CACHE_DIR_ENV):
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pollux"


def default_cache_dir(artifact: Artifact = DATASET) -> Path:
    """Where `pollux data fetch` puts an artifact's data unless told otherwise."""
    return cache_root() / check_artifact(artifact)


def looks_like_data(path: Path) -> bool:
    """A folder holding either artifact has `profiles/`; checking that avoids picking up an empty shell."""
    return (path / "profiles").is_dir()


def _given_dir(path: Path, source: str, artifact: Artifact) -> DataLocation:
    """A folder the user named must exist: silently falling back elsewhere would hide their mistake."""
    path = path.expanduser()
    hint = fetch_hint(artifact)
    if not path.is_dir():
        raise DataNotFoundError(f"{source} {path} does not exist or is not a folder; {hint}")
    if not looks_like_data(path):
        raise DataNotFoundError(
            f"{source} {path} has no profiles/ folder: point it at the {artifact} folder itself; {hint}"
        )
    return DataLocation(path=path.resolve(), source=source)


def find_data_dir(data_dir: Path | None = None, artifact: Artifact = DATASET) -> DataLocation:
    """Resolve an artifact's data folder: explicit argument > its environment variable > shared folder > cache."""
    artifact = check_artifact(artifact)
    if data_dir is not None:
        return _given_dir(Path(data_dir), "--data-dir", artifact)
    env = DATA_DIR_ENVS[artifact]
    if env_dir := os.environ.get(env):
        return _given_dir(Path(env_dir), env, artifact)
    shared = shared_data_dir(artifact)
    if looks_like_data(shared):
        return DataLocation(path=shared.resolve(), source="shared")
    cache_dir = default_cache_dir(artifact)
    if looks_like_data(cache_dir):
        return DataLocation(path=cache_dir.resolve(), source="cache")
    label = "Pollux data" if artifact == DATASET else f"{artifact} data"
    raise DataNotFoundError(f"{label} not found (looked in {shared} and {cache_dir}); {fetch_hint(artifact)}")


def sia_scale_dir(root: Path) -> Path:
    """The folder of the Sia artifact's scale and rate workloads for the data folder `root`: its own
    `workloads/scale/`, else `sia-sosp23-scale/workloads/` beside it (the layout of `../shared/data`), else the
    former (absent: reads then name the place a fetch fills)."""
    inside = root / SIA_SCALE_FOLDER
    if inside.is_dir():
        return inside
    beside = root.parent / SIA_SCALE_SIBLING
    return beside if beside.is_dir() else inside


def data_file(root: Path, path: str) -> Path:
    """Where the manifest's relative `path` lies for the data folder `root` (`sia_scale_dir` for the scale
    workloads)."""
    prefix = SIA_SCALE_FOLDER + "/"
    return sia_scale_dir(root) / path.removeprefix(prefix) if path.startswith(prefix) else root / path


def data_files(root: Path, artifact: Artifact = DATASET) -> dict[str, Path]:
    """Every file of `artifact`'s data folder `root` by its manifest path (the Sia scale workloads beside it
    included), sorted by that path."""
    files = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
    scale = sia_scale_dir(root)
    if check_artifact(artifact) == SIA_DATASET and scale != root / SIA_SCALE_FOLDER and scale.is_dir():
        files |= {f"{SIA_SCALE_FOLDER}/{p.relative_to(scale).as_posix()}": p for p in scale.rglob("*") if p.is_file()}
    return dict(sorted(files.items()))

"""The committed manifests: every data file's sha256 and size, and where it comes from at its origin.

One manifest per artifact, in this package: `manifest.json` for the Pollux OSDI'21 artifact (github.com/petuum/adaptdl
at a fixed commit, folder `simulator/`) and `manifest-sia-sosp23.json` for the Sia SOSP'23 one
(github.com/siasosp23/artifacts at a fixed commit, folder `sia-simulator/`). Their layouts differ from ours, so each
local path maps to an origin path (`origin_path_for`). Most files are byte-identical copies. The Pollux artifact's
published results (`anchor-results/.../jcts.json`) are not: they hold the per-job completion times of workloads 1-4
taken out of the origin's `summary.json` (which also covers workloads 5-8 and averages); those entries name the
transform (`derive`) that rebuilds them, and their sha256 checks the result.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pollux.data.locate import DATASET, SIA_DATASET, SIA_SCALE_FOLDER, Artifact, check_artifact
from pollux.errors import DataIntegrityError

ORIGIN_REPOSITORY = "https://github.com/petuum/adaptdl"
ORIGIN_COMMIT = "c793c7089bd307462686339d29707925c461f9a9"
ORIGIN_FOLDER = "simulator/"

SIA_ORIGIN_REPOSITORY = "https://github.com/siasosp23/artifacts"
SIA_ORIGIN_COMMIT = "aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70"
SIA_ORIGIN_FOLDER = "sia-simulator/"

# artifact: (repository, commit, folder of the origin), and the manifest file in this package
ORIGINS: dict[Artifact, tuple[str, str, str]] = {
    DATASET: (ORIGIN_REPOSITORY, ORIGIN_COMMIT, ORIGIN_FOLDER),
    SIA_DATASET: (SIA_ORIGIN_REPOSITORY, SIA_ORIGIN_COMMIT, SIA_ORIGIN_FOLDER),
}
MANIFEST_FILES: dict[Artifact, str] = {DATASET: "manifest.json", SIA_DATASET: "manifest-sia-sosp23.json"}

ANCHOR_WORKLOADS = ("workload-1", "workload-2", "workload-3", "workload-4")


@dataclass(frozen=True)
class ManifestEntry:
    """One data file. `origin` is its path under the origin folder (None: not fetchable); `derive` names the
    transform in `DERIVATIONS` that turns the origin file into this one (None: a byte-identical copy)."""

    path: str
    origin: str | None
    sha256: str
    size: int
    derive: str | None = None


@dataclass(frozen=True)
class Manifest:
    """All files of the data set, sorted by local path."""

    repository: str
    commit: str
    folder: str
    files: tuple[ManifestEntry, ...]

    def subset(self, paths: set[str]) -> Manifest:
        """The same manifest restricted to `paths` (fetch or verify a part of the data)."""
        return Manifest(self.repository, self.commit, self.folder, tuple(e for e in self.files if e.path in paths))


def derive_anchor_jcts(summary: bytes) -> bytes:
    """`summary.json` of a reference run → our `jcts.json`: the JCTs of workloads 1-4, keys sorted, indent 1."""
    jcts = json.loads(summary)["jcts"]
    return json.dumps({"jcts": {name: jcts[name] for name in ANCHOR_WORKLOADS}}, indent=1, sort_keys=True).encode()


DERIVATIONS: dict[str, Callable[[bytes], bytes]] = {"anchor-jcts": derive_anchor_jcts}


def origin_path_for(path: str, artifact: Artifact = DATASET) -> tuple[str | None, str | None]:
    """Map a local relative path of `artifact` to (origin relative path, derivation); (None, None) if it has no
    origin."""
    if check_artifact(artifact) == SIA_DATASET:
        return _sia_origin_path(path), None
    parts = path.split("/")
    if parts[0] == "profiles" and len(parts) == 3:
        return f"traces/{parts[1]}/{parts[2]}", None
    if parts[0] == "workloads" and len(parts) == 3 and parts[1].startswith("workloads"):
        return f"{parts[1]}/{parts[2]}", None
    if path == "philly-jobs.csv":
        return "traces/philly.csv", None
    if parts[0] == "anchor-results" and len(parts) == 4 and parts[3] == "jcts.json":
        return f"{parts[1]}/{parts[2]}/summary.json", "anchor-jcts"
    return None, None


def _sia_origin_path(path: str) -> str | None:
    """Sia's `sia-simulator/`: `traces/<model>/<file>` → `profiles/<model>/<file>`, and `workloads/<trace>/<file>`
    (philly, saturn) and `workloads/scale/<set>/<file>` (rate_10 … rate_50, scale_2x … scale_32x) in the same
    place."""
    parts = path.split("/")
    if len(parts) == 3 and parts[0] == "profiles":
        return f"traces/{parts[1]}/{parts[2]}"
    if len(parts) == 3 and parts[0] == "workloads" and parts[1] != "scale":
        return path
    if len(parts) == 4 and path.startswith(SIA_SCALE_FOLDER + "/"):
        return path
    return None


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks so a large trace does not sit in memory twice."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_to_json(manifest: Manifest) -> str:
    """Deterministic text of the manifest, one file per line and sorted, so regenerating it is a no-op and a
    change shows as a one-line diff."""
    origin = {"repository": manifest.repository, "commit": manifest.commit, "folder": manifest.folder}
    rows = [
        json.dumps({"path": e.path, "origin": e.origin, "derive": e.derive, "sha256": e.sha256, "size": e.size})
        for e in sorted(manifest.files, key=lambda e: e.path)
    ]
    return '{\n "origin": ' + json.dumps(origin) + ',\n "files": [\n  ' + ",\n  ".join(rows) + "\n ]\n}\n"


def manifest_from_json(text: str, source: str = "manifest.json") -> Manifest:
    """Parse the manifest, refusing anything malformed: every later integrity check relies on it."""
    try:
        doc = json.loads(text)
        origin = doc["origin"]
        files = tuple(
            ManifestEntry(
                path=f["path"],
                origin=f["origin"],
                sha256=f["sha256"],
                size=int(f["size"]),
                derive=f["derive"],
            )
            for f in doc["files"]
        )
        manifest = Manifest(origin["repository"], origin["commit"], origin["folder"], files)
    except (ValueError, KeyError, TypeError) as err:
        raise DataIntegrityError(f"{source}: malformed manifest ({err!r}); reinstall pollux") from err
    unknown = {e.derive for e in files if e.derive is not None} - set(DERIVATIONS)
    if unknown:
        raise DataIntegrityError(f"{source}: unknown derivation(s) {sorted(unknown)}; known: {sorted(DERIVATIONS)}")
    return manifest


def load_manifest(artifact: Artifact = DATASET) -> Manifest:
    """The manifest of `artifact` shipped inside the package (`pollux/data/manifest.json` for the Pollux artifact,
    `pollux/data/manifest-sia-sosp23.json` for Sia's)."""
    name = MANIFEST_FILES[check_artifact(artifact)]
    text = resources.files("pollux.data").joinpath(name).read_text(encoding="utf-8")
    return manifest_from_json(text, source=name)

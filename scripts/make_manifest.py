"""Regenerate an artifact's manifest (`pollux/data/manifest.json`, `pollux/data/manifest-sia-sosp23.json`) from a
verified copy of its data (default: ../shared/data/<artifact>).

Run it when a data set changes: `python scripts/make_manifest.py [--artifact NAME] [--data-dir DIR] [--output FILE]`.
The output is deterministic (sorted by path), so running it on the same files changes nothing. It refuses a file
that has no origin, or an anchor result that the fetch could not rebuild byte for byte, rather than shipping a
manifest that `pollux data fetch` cannot satisfy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pollux.data.locate import ARTIFACTS, DATASET, Artifact, data_files, shared_data_dir
from pollux.data.manifest import (
    DERIVATIONS,
    MANIFEST_FILES,
    ORIGINS,
    Manifest,
    ManifestEntry,
    manifest_to_json,
    origin_path_for,
    sha256_file,
)

PACKAGE_DATA = Path(__file__).resolve().parents[1] / "pollux" / "data"


def rebuilds_itself(path: Path, derive: str) -> bool:
    """A derived file is fetchable only if the derivation reproduces it exactly: feed it its own content
    (it has the same `jcts` key as the origin's summary) and compare bytes."""
    content = path.read_bytes()
    return DERIVATIONS[derive](content) == content


def build_manifest(data_dir: Path, artifact: Artifact = DATASET) -> tuple[Manifest, list[str]]:
    """Manifest of every file of `data_dir` (`data_files`: the Sia scale workloads beside it included), and the
    problems found (files the fetch could not provide)."""
    entries, problems = [], []
    for rel, file in data_files(data_dir, artifact).items():
        origin, derive = origin_path_for(rel, artifact)
        if origin is None:
            problems.append(f"{rel}: no origin path (add a rule to pollux.data.manifest.origin_path_for)")
        elif derive is not None and not rebuilds_itself(file, derive):
            problems.append(f"{rel}: derivation {derive!r} does not reproduce it byte for byte")
        entries.append(ManifestEntry(rel, origin, sha256_file(file), file.stat().st_size, derive))
    return Manifest(*ORIGINS[artifact], tuple(entries)), problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", choices=ARTIFACTS, default=DATASET)
    parser.add_argument("--data-dir", type=Path, default=None, help="default: ../shared/data/<artifact>")
    parser.add_argument("--output", type=Path, default=None, help="default: the artifact's manifest in pollux/data")
    args = parser.parse_args(argv)
    data_dir = args.data_dir or shared_data_dir(args.artifact)
    output = args.output or PACKAGE_DATA / MANIFEST_FILES[args.artifact]
    if not data_dir.is_dir():
        print(f"error: data folder {data_dir} not found", file=sys.stderr)
        return 2
    manifest, problems = build_manifest(data_dir, args.artifact)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 1
    output.write_text(manifest_to_json(manifest), encoding="utf-8")
    total = sum(e.size for e in manifest.files)
    print(f"{output}: {len(manifest.files)} files, {total:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

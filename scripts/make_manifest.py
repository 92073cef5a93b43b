"""Regenerate `pollux/data/manifest.json` from a verified copy of the data (default: ../shared/data/pollux-osdi21).

Run it when the data set changes: `python scripts/make_manifest.py [--data-dir DIR] [--output FILE]`. The output is
deterministic (sorted by path), so running it on the same files changes nothing. It refuses a file that has no
origin, or an anchor result that the fetch could not rebuild byte for byte, rather than shipping a manifest that
`pollux data fetch` cannot satisfy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pollux.data.locate import SHARED_DATA_DIR
from pollux.data.manifest import (
    DERIVATIONS,
    ORIGIN_COMMIT,
    ORIGIN_FOLDER,
    ORIGIN_REPOSITORY,
    Manifest,
    ManifestEntry,
    manifest_to_json,
    origin_path_for,
    sha256_file,
)

DEFAULT_OUTPUT = Path(__file__).resolve().parents[1] / "pollux" / "data" / "manifest.json"


def rebuilds_itself(path: Path, derive: str) -> bool:
    """A derived file is fetchable only if the derivation reproduces it exactly: feed it its own content
    (it has the same `jcts` key as the origin's summary) and compare bytes."""
    content = path.read_bytes()
    return DERIVATIONS[derive](content) == content


def build_manifest(data_dir: Path) -> tuple[Manifest, list[str]]:
    """Manifest of every file under `data_dir`, and the problems found (files the fetch could not provide)."""
    entries, problems = [], []
    for file in sorted(p for p in data_dir.rglob("*") if p.is_file()):
        rel = file.relative_to(data_dir).as_posix()
        origin, derive = origin_path_for(rel)
        if origin is None:
            problems.append(f"{rel}: no origin path (add a rule to pollux.data.manifest.origin_path_for)")
        elif derive is not None and not rebuilds_itself(file, derive):
            problems.append(f"{rel}: derivation {derive!r} does not reproduce it byte for byte")
        entries.append(ManifestEntry(rel, origin, sha256_file(file), file.stat().st_size, derive))
    return Manifest(ORIGIN_REPOSITORY, ORIGIN_COMMIT, ORIGIN_FOLDER, tuple(entries)), problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=SHARED_DATA_DIR)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    if not args.data_dir.is_dir():
        print(f"error: data folder {args.data_dir} not found", file=sys.stderr)
        return 2
    manifest, problems = build_manifest(args.data_dir)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 1
    args.output.write_text(manifest_to_json(manifest), encoding="utf-8")
    total = sum(e.size for e in manifest.files)
    print(f"{args.output}: {len(manifest.files)} files, {total:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Check a data folder against its committed manifest: the simulator's fidelity rests on these exact bytes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pollux.data.locate import DATASET, Artifact, data_file
from pollux.data.manifest import Manifest, load_manifest, sha256_file


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of `verify`: which manifest files are absent, and which differ from their sha256."""

    root: Path
    checked: int  # files present and matching
    missing: tuple[str, ...]
    mismatched: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.missing and not self.mismatched

    def summary(self) -> str:
        """One line for a person: counts, and the first few offending paths."""
        total = self.checked + len(self.missing) + len(self.mismatched)
        text = f"{self.checked}/{total} files match the manifest"
        for label, paths in (("missing", self.missing), ("mismatched", self.mismatched)):
            if paths:
                shown = ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")
                text += f"; {len(paths)} {label}: {shown}"
        return text


def verify(path: Path, manifest: Manifest | None = None, artifact: Artifact = DATASET) -> VerifyReport:
    """Hash every file of `manifest` (default: `artifact`'s) under `path`, or where `data_file` finds it (cheap: each
    set is a few MB)."""
    manifest = manifest or load_manifest(artifact)
    root = Path(path)
    missing, mismatched, checked = [], [], 0
    for entry in manifest.files:
        file = data_file(root, entry.path)
        if not file.is_file():
            missing.append(entry.path)
        elif file.stat().st_size != entry.size or sha256_file(file) != entry.sha256:
            mismatched.append(entry.path)
        else:
            checked += 1
    return VerifyReport(root=root, checked=checked, missing=tuple(missing), mismatched=tuple(mismatched))

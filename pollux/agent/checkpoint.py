"""Checkpoint files that cannot be half-read: framed, checksummed, written atomically, two kept (torch-free).

Why: an elastic job is stopped and restarted many times (Pollux §4: every reallocation is a restart), so a kill
during a save must never cost the job its progress. Each save writes `ckpt-<seq>.plx` = header (magic, payload
length, sha256 of the payload) + payload via write-then-rename, then prunes all but the newest two (never the last
good one). Loading walks from the newest down; a file whose magic, length or checksum does not match is reported in
one log line and the previous good one is used.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from pollux.agent.atomic import fsync_dir, write_atomic
from pollux.errors import CheckpointError, CorruptCheckpoint

LOG = logging.getLogger(__name__)

MAGIC = b"PLXCKPT1"
HEADER = struct.Struct("<8sQ32s")  # magic, payload length in bytes, sha256 of the payload
NAME = re.compile(r"^ckpt-(\d{8})\.plx$")


@dataclass(frozen=True)
class LoadedCheckpoint:
    path: Path
    payload: bytes


def frame(payload: bytes) -> bytes:
    """Header + payload, so a truncated or altered file is recognised before anything is unpickled."""
    return HEADER.pack(MAGIC, len(payload), hashlib.sha256(payload).digest()) + payload


def unframe(data: bytes) -> bytes:
    """The payload of a framed file; raises `CorruptCheckpoint` saying which check failed."""
    if len(data) < HEADER.size:
        raise CorruptCheckpoint(f"{len(data)} bytes, shorter than the {HEADER.size}-byte header")
    magic, length, digest = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptCheckpoint(f"bad magic {magic!r}, expected {MAGIC!r}")
    payload = data[HEADER.size :]
    if len(payload) != length:
        raise CorruptCheckpoint(f"payload is {len(payload)} bytes, header says {length} (partial write?)")
    if hashlib.sha256(payload).digest() != digest:
        raise CorruptCheckpoint("sha256 of the payload does not match the header")
    return payload


class CheckpointStore:
    """The checkpoint files of one job in one directory."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 2) -> None:
        if keep < 2:
            raise ValueError("CheckpointStore keeps at least 2 files (the new one and the previous good one)")
        self.directory = Path(directory)
        self.keep = keep
        self._last_good: Path | None = None  # set by load_latest and save; pruning never deletes it

    def _files(self) -> list[tuple[int, Path]]:
        """(sequence number, path) of every checkpoint file, newest first; temporary files are ignored."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = NAME.match(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found, reverse=True)

    def save(self, payload: bytes) -> Path:
        """Write a new checkpoint after the newest existing one, then drop the oldest beyond `keep`."""
        files = self._files()
        seq = files[0][0] + 1 if files else 0
        path = write_atomic(self.directory / f"ckpt-{seq:08d}.plx", frame(payload))
        keep = {path, self._last_good} if self._last_good is not None else {path}
        for _, old in files:
            if len(keep) < self.keep:
                keep.add(old)
            elif old not in keep:
                old.unlink(missing_ok=True)
        fsync_dir(self.directory)
        self._last_good = path
        return path

    def load_latest(self) -> LoadedCheckpoint | None:
        """The newest checkpoint that passes its integrity check; None if there are none at all.

        Raises `CheckpointError` when checkpoint files exist but every one is corrupt: silently starting over would
        throw away the job's progress, so the user decides.
        """
        files = self._files()
        rejected: list[str] = []
        for _, path in files:
            try:
                payload = unframe(path.read_bytes())
            except (CorruptCheckpoint, OSError) as exc:
                LOG.warning("checkpoint %s is corrupt or unreadable (%s); trying the previous one", path, exc)
                rejected.append(f"{path.name}: {exc}")
                continue
            if rejected:
                LOG.warning("restoring from the previous good checkpoint %s (skipped %d corrupt)", path, len(rejected))
            self._last_good = path
            return LoadedCheckpoint(path, payload)
        if rejected:
            raise CheckpointError(
                f"{self.directory}: no good checkpoint ({'; '.join(rejected)}); "
                "delete these files to start the job over, or point the checkpoint directory elsewhere"
            )
        return None

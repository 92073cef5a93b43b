"""Write-then-rename file replacement, shared by checkpoints and reports (torch-free).

A reader (the scheduler, or the job itself after a restart) sees either the old file or the new one in full, never a
torn mix, even if the writer is killed mid-write: the bytes go to a temporary file in the same directory, are
fsync'ed, and `os.replace` swaps the name atomically; the directory is fsync'ed so the rename survives a crash.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: bytes, durable: bool = True) -> Path:
    """Replace `path` by `data` atomically (creating parent directories); returns the path written.

    `durable=False` skips the fsyncs: readers still never see a torn file, but after a machine crash the old
    version may come back (fine for a status file that is rewritten every few seconds; not for a checkpoint).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(target.parent)
    return target


def fsync_dir(directory: Path) -> None:
    """Persist a directory entry change (rename, unlink); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

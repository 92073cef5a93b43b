"""Download an artifact's data from its public origin into the user cache, checking every byte.

Each file goes to a temporary name beside its target and is renamed into place only once its sha256 matches the
manifest (pooch does this for plain copies; `_install` for the derived anchor results), so an interrupted or
corrupted download never leaves a file that looks valid. Files already present and verified are skipped, so a
second `pollux data fetch` costs only the hashing.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pooch
import requests
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TransferSpeedColumn

from pollux.data.locate import CACHE_DIR_ENV, DATA_DIR_ENVS, DATASET, Artifact, check_artifact, default_cache_dir
from pollux.data.manifest import DERIVATIONS, ORIGINS, Manifest, ManifestEntry, load_manifest, sha256_file
from pollux.errors import DataIntegrityError, DataNotFoundError

DEFAULT_BASE_URL = (
    "https://raw.githubusercontent.com/petuum/adaptdl/c793c7089bd307462686339d29707925c461f9a9/simulator/"
)
TIMEOUT_S = 30.0


def default_base_url(artifact: Artifact = DATASET) -> str:
    """The raw-file URL of `artifact`'s origin folder at its pinned commit (`DEFAULT_BASE_URL` for Pollux's)."""
    repository, commit, folder = ORIGINS[check_artifact(artifact)]
    return f"{repository.replace('https://github.com/', 'https://raw.githubusercontent.com/')}/{commit}/{folder}"


class _Bytes:
    """The progress-bar object pooch's HTTPDownloader drives (`total`, `update`, `reset`, `close`), feeding one
    rich task that counts bytes over all files; sizes come from the manifest, not from content-length."""

    def __init__(self, progress: Progress | None, task: TaskID | None) -> None:
        self.progress, self.task = progress, task
        self.total = 0
        self.base = 0  # bytes of the files already done
        self.size = 0  # size of the file in flight
        self.done = 0

    def start(self, entry: ManifestEntry) -> None:
        self.size, self.done = entry.size, 0
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, description=entry.path)

    def update(self, n: int) -> None:
        self.done = min(self.done + n, self.size)
        self._show()

    def reset(self) -> None:
        self.done = 0

    def close(self) -> None:
        """Pooch closes after each file; the bar lives on across files."""

    def finish(self) -> None:
        self.base += self.size
        self.size = self.done = 0
        self._show()

    def _show(self) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=self.base + self.done)


@contextlib.contextmanager
def _quiet_pooch() -> Iterator[None]:
    """Pooch logs a line per file to stderr; our progress bar replaces that."""
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _progress_bar(show: bool, total: int) -> Iterator[_Bytes]:
    """A rich bar on stderr when a person is watching; silent otherwise (pipes, CI, tests)."""
    console = Console(stderr=True)
    if not show or not console.is_terminal:
        yield _Bytes(None, None)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        yield _Bytes(progress, progress.add_task("pollux data", total=total))


def _unreachable(url: str, reason: str, artifact: Artifact) -> DataNotFoundError:
    retry = "pollux data fetch" if artifact == DATASET else f"pollux data fetch --artifact {artifact}"
    return DataNotFoundError(
        f"cannot download {url} ({reason}); set {DATA_DIR_ENVS[artifact]} to a copy of the data, "
        f"or retry `{retry} --base-url URL` with a reachable mirror"
    )


def _corrupt(entry: ManifestEntry, url: str, why: str) -> DataIntegrityError:
    return DataIntegrityError(
        f"{entry.path}: {why} (downloaded from {url}); refused, nothing written. "
        "The mirror holds another version or a damaged copy: try another --base-url"
    )


def _mkdirs(folder: Path, created: list[Path]) -> None:
    """Create `folder` and its missing parents, remembering which, so a failed fetch can take them back."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    for path in reversed(missing):
        path.mkdir()
        created.append(path)


def _install(target: Path, content: bytes, entry: ManifestEntry, url: str) -> None:
    """Write `content` to a temporary file beside `target` and rename it into place only if it matches."""
    if hashlib.sha256(content).hexdigest() != entry.sha256:
        raise _corrupt(entry, url, "does not match the manifest's sha256")
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _fetch_derived(entry: ManifestEntry, url: str, target: Path, downloader: pooch.HTTPDownloader) -> None:
    """Download the origin file to a temporary name, derive ours from it, and install that if it matches."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".origin")
    os.close(fd)
    try:
        downloader(url, tmp, None)
        raw = Path(tmp).read_bytes()
    finally:
        os.remove(tmp)
    try:
        content = DERIVATIONS[str(entry.derive)](raw)
    except (ValueError, KeyError, TypeError) as err:
        raise _corrupt(entry, url, f"origin file is not what {entry.derive!r} expects ({err!r})") from err
    _install(target, content, entry, url)


def _fetch_one(entry: ManifestEntry, base_url: str, dest: Path, bar: _Bytes, artifact: Artifact) -> None:
    url = base_url + str(entry.origin)
    target = dest / entry.path
    downloader = pooch.HTTPDownloader(progressbar=bar, timeout=TIMEOUT_S)
    try:
        if entry.derive is not None:
            _fetch_derived(entry, url, target, downloader)
        else:
            pooch.retrieve(
                url,
                known_hash=f"sha256:{entry.sha256}",
                fname=target.name,
                path=target.parent,
                downloader=downloader,
            )
    except requests.exceptions.HTTPError as err:
        status = err.response.status_code if err.response is not None else "error"
        raise _unreachable(url, f"HTTP {status}", artifact) from err
    except requests.exceptions.Timeout as err:
        raise _unreachable(url, f"no answer in {TIMEOUT_S:g} s", artifact) from err
    except requests.exceptions.RequestException as err:
        raise _unreachable(url, f"{type(err).__name__}: cannot connect", artifact) from err
    except ValueError as err:  # pooch's sha256 mismatch (it has already deleted the download)
        raise _corrupt(entry, url, "does not match the manifest's sha256") from err


def _is_verified(path: Path, entry: ManifestEntry) -> bool:
    return path.is_file() and path.stat().st_size == entry.size and sha256_file(path) == entry.sha256


def fetch(
    dest: Path | None = None,
    base_url: str | None = None,
    progress: bool = True,
    manifest: Manifest | None = None,
    artifact: Artifact = DATASET,
) -> Path:
    """Fill `dest` (default: the user cache of `artifact`) with every fetchable file of its manifest; return `dest`.

    `base_url` is the origin's folder (`simulator/` for Pollux's, `sia-simulator/` for Sia's; default: the public
    origin at the pinned commit) or a mirror in the same layout. `manifest` restricts the fetch to some files
    (tests, partial mirrors). Raises `DataNotFoundError` when the origin cannot be reached and
    `DataIntegrityError` when a downloaded file does not match its sha256; either way no unverified file and no
    folder created by this call is left behind.
    """
    artifact = check_artifact(artifact)
    dest = Path(dest).expanduser() if dest is not None else default_cache_dir(artifact)
    manifest = manifest or load_manifest(artifact)
    base_url = base_url or default_base_url(artifact)
    base_url = base_url if base_url.endswith("/") else base_url + "/"
    todo = [e for e in manifest.files if e.origin is not None and not _is_verified(dest / e.path, e)]
    created: list[Path] = []
    try:
        _mkdirs(dest, created)
        with _quiet_pooch(), _progress_bar(progress, sum(e.size for e in todo)) as bar:
            for entry in todo:
                _mkdirs((dest / entry.path).parent, created)
                bar.start(entry)
                _fetch_one(entry, base_url, dest, bar, artifact)
                bar.finish()
    except BaseException as err:
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only succeeds on folders left empty
        if isinstance(err, OSError):  # the network's OSErrors became PolluxErrors in _fetch_one
            raise DataNotFoundError(
                f"cannot write the data to {dest} ({err.strerror or err}); choose another folder with "
                f"`pollux data fetch --dest DIR` or {CACHE_DIR_ENV}, or set {DATA_DIR_ENVS[artifact]} to a copy of "
                "the data"
            ) from err
        raise
    return dest

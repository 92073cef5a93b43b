"""Fixtures for pollux.data: an isolated home and cache, the real data (when present), and loopback HTTP origins.

No test touches the network or the real user cache: HOME, XDG_CACHE_HOME, POLLUX_CACHE_DIR, POLLUX_DATA_DIR and
POLLUX_SIA_DATA_DIR are replaced for every test, and "the origin" is a ThreadingHTTPServer on 127.0.0.1 serving a
copy of the data laid out as github.com/petuum/adaptdl's `simulator/` folder (or, for the Sia artifact, as
github.com/siasosp23/artifacts' `sia-simulator/` folder).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pollux.data import locate
from pollux.data.manifest import load_manifest

SHARED = locate.SHARED_DATA_DIR
SIA_SHARED = locate.SIA_SHARED_DATA_DIR


def _require_shared(path: Path = SHARED) -> Path:
    if not locate.looks_like_data(path):
        pytest.skip(f"needs the real data at {path}")
    return path


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh home and cache for every test; returns the cache root."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv(locate.DATA_DIR_ENV, raising=False)
    monkeypatch.delenv(locate.SIA_DATA_DIR_ENV, raising=False)
    cache = tmp_path / "cache-root"
    monkeypatch.setenv(locate.CACHE_DIR_ENV, str(cache))
    return cache


@pytest.fixture
def no_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Pretend the repository has no ../shared/data beside it (for either artifact); returns the Pollux one."""
    missing = tmp_path / "no-shared" / "pollux-osdi21"
    monkeypatch.setattr(locate, "SHARED_DATA_DIR", missing)
    monkeypatch.setattr(locate, "SIA_SHARED_DATA_DIR", missing.parent / "sia-sosp23")
    return missing


@pytest.fixture
def shared_data() -> Path:
    """The real data beside the repository (skips the test where it is absent)."""
    return _require_shared()


@pytest.fixture
def sia_shared_data() -> Path:
    """The Sia artifact's real data beside the repository (skips the test where it is absent)."""
    return _require_shared(SIA_SHARED)


def summary_json(jcts_file: Path) -> bytes:
    """Rebuild an origin `summary.json` from our `jcts.json`: same JCTs, plus a workload and averages that the
    derivation must drop, in the origin's own formatting (indent 4, unsorted)."""
    jcts = json.loads(jcts_file.read_bytes())["jcts"]
    jcts["workload-5"] = dict(jcts["workload-1"])
    avgs = {name: sum(times.values()) / len(times) for name, times in jcts.items()}
    return json.dumps({"jcts": jcts, "avgs": avgs, "mean": sum(avgs.values()) / len(avgs)}, indent=4).encode()


@pytest.fixture(scope="session")
def origin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real data copied into the origin's layout (traces/, workloads*/, results-*/.../summary.json)."""
    shared = _require_shared()
    root = tmp_path_factory.mktemp("origin") / "simulator"
    for entry in load_manifest().files:
        assert entry.origin is not None, entry.path
        target = root / entry.origin
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.derive is None:
            shutil.copyfile(shared / entry.path, target)
        else:
            target.write_bytes(summary_json(shared / entry.path))
    return root


class _QuietHandler(SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output clean."""

    def do_GET(self) -> None:
        self.requests.append(self.path)
        super().do_GET()


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve `directory` on a free loopback port; yields (base URL, list of requested paths)."""
    requests: list[str] = []
    handler = type("Handler", (_QuietHandler,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def origin_server(origin_dir: Path) -> Iterator[tuple[str, list[str]]]:
    with serve(origin_dir) as served:
        yield served


@pytest.fixture(scope="session")
def sia_origin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Sia artifact's real data copied into its origin's layout (traces/<model>/, workloads/<trace>/,
    workloads/scale/<set>/)."""
    shared = _require_shared(SIA_SHARED)
    root = tmp_path_factory.mktemp("sia-origin") / "sia-simulator"
    for entry in load_manifest("sia-sosp23").files:
        assert entry.origin is not None and entry.derive is None, entry.path
        target = root / entry.origin
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(locate.data_file(shared, entry.path), target)
    return root


@pytest.fixture
def sia_origin_server(sia_origin_dir: Path) -> Iterator[tuple[str, list[str]]]:
    with serve(sia_origin_dir) as served:
        yield served


@pytest.fixture
def serve_dir() -> Callable[[Path], contextlib.AbstractContextManager[tuple[str, list[str]]]]:
    """`serve` as a fixture, for tests that serve a tampered copy of the origin."""
    return serve


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL on which nothing listens: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"

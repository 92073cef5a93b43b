"""Fixtures shared by test packages: a real headless browser, and where tests leave artifacts for people to look at."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.headless import INSTALL_HINT, Browser, chromium_path

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def artifact_dir() -> Path:
    """Screenshots and pages the tests save: $POLLUX_TEST_ARTIFACTS, else results/test-artifacts (git-ignored)."""
    folder = Path(os.environ.get("POLLUX_TEST_ARTIFACTS") or REPO / "results" / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture()
def browser() -> Iterator[Browser]:
    """Headless Chromium on one page. Missing, it fails the test with what to install (`make test` checks first)."""
    if chromium_path() is None:
        pytest.fail(INSTALL_HINT)
    with Browser() as page:
        yield page

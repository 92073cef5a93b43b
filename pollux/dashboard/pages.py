"""The HTML pages: the dashboard, its login form and the simulator's report, each one file with its styles and
scripts inlined (the dashboard loads in one request; the report opens from disk with no network).

The pages carry no secret: the dashboard fetches its data with the session cookie, and the login page only says
where the token file is. Scripts run under a per-response nonce (`Content-Security-Policy`, `pollux.runtime.api`).
"""

from __future__ import annotations

import html
import json
from functools import cache
from importlib import resources
from string import Template
from typing import Any

POLL_MS = 1000


@cache
def _asset(name: str) -> str:
    return resources.files("pollux.dashboard").joinpath("static", name).read_text(encoding="utf-8")


def dashboard_page(nonce: str, poll_ms: int = POLL_MS) -> str:
    """The live dashboard; its script polls `/v1/dashboard` every `poll_ms`."""
    return Template(_asset("dashboard.html")).substitute(
        nonce=nonce,
        css=_asset("pollux.css"),
        poll_ms=poll_ms,
        charts_js=_asset("charts.js"),
        dashboard_js=_asset("dashboard.js"),
    )


def login_page(nonce: str, token_path: str, message: str = "") -> str:
    """The login form (no data): the token is POSTed, so it never appears in a URL or a log."""
    return Template(_asset("login.html")).substitute(
        nonce=nonce, css=_asset("pollux.css"), token_path=html.escape(token_path), message=html.escape(message)
    )


def report_page(title: str, data: dict[str, Any]) -> str:
    """The simulator's report with `data` inlined as JSON (`</` escaped, so no value can close the script)."""
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return Template(_asset("report.html")).substitute(
        title=html.escape(title),
        css=_asset("pollux.css"),
        data=payload,
        charts_js=_asset("charts.js"),
        report_js=_asset("report.js"),
    )

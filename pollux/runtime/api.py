"""The service's HTTP API (JSON over HTTP/1.1, standard library only) and the client the CLI uses.

Every request carries `Authorization: Bearer <token>`; the token is a random secret that each `pollux up` writes to
`<state_dir>/token` with mode 0600 (the folder is 0700), so only the user who started the service (and root) can
drive it. The server binds 127.0.0.1 unless told otherwise (with --allow-remote the token travels in clear HTTP:
put a TLS proxy in front). Routes:

    GET  /v1/health                     service, backend, policy, cluster
    GET  /v1/jobs                       every job, one row each (what `pollux ls` prints)
    POST /v1/jobs                       {"spec": TOML text, "source": file name, "base": folder} -> the new job
    GET  /v1/jobs/NAME                  the job's row, status history, last report
    GET  /v1/jobs/NAME/logs?cursor=C   log lines since cursor C (every rank's, prefixed), and the next cursor
    POST /v1/jobs/NAME/cancel           stop it for good (it checkpoints first)
    POST /v1/shutdown                   stop the service; jobs checkpoint and resume at the next `pollux up`
    GET  /v1/dashboard                  the dashboard's poll: cluster, job rows, recent rounds (pollux.dashboard)
    GET  /v1/dashboard/jobs/NAME        a job's page: its row, goodput/batch/GPUs over time, history, log tail
    POST /v1/dashboard/link             a one-time login link for a browser (`pollux dashboard`)
    GET  /ui/                           the dashboard page (HTML); GET|POST /ui/login: its login form

A browser proves itself once, with the token typed into the login form or with a one-time link, and then holds a
session cookie (HttpOnly, SameSite=Strict) that is good for GET requests only: everything that changes state still
needs the token itself. Every route but the login form answers 401 without one or the other (`ROUTES`).

Errors come back as {"error": one line} with 400 (bad input), 401 (token), 404 (unknown job or route) or 500 (a bug,
logged; the service keeps running).
"""

from __future__ import annotations

import hmac
import http.client
import json
import logging
import os
import secrets
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from pollux.cluster import placement
from pollux.dashboard import pages, views
from pollux.dashboard.sessions import Sessions
from pollux.errors import PolluxError, SchedulerDownError, ServiceError, UnknownJobError
from pollux.runtime import joblog
from pollux.runtime.processes import process_start_ticks
from pollux.runtime.reports import report_metrics
from pollux.runtime.service import Service
from pollux.runtime.spec import loads_spec
from pollux.runtime.store import JobState

LOG = logging.getLogger("pollux.runtime.api")
_HOST = socket.gethostname()
TOKEN_FILE = "token"
ENDPOINT_FILE = "endpoint.json"
MAX_BODY = 1 << 20
DASHBOARD_PATH = "/ui/"
LOGIN_PATH = "/ui/login"
# Every route, for the test that walks them all without credentials (NAME: any job).
ROUTES = (
    ("GET", "/v1/health"),
    ("GET", "/v1/jobs"),
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs/NAME"),
    ("GET", "/v1/jobs/NAME/logs"),
    ("POST", "/v1/jobs/NAME/cancel"),
    ("POST", "/v1/shutdown"),
    ("GET", "/v1/dashboard"),
    ("GET", "/v1/dashboard/jobs/NAME"),
    ("POST", "/v1/dashboard/link"),
    ("GET", "/"),
    ("GET", "/ui"),
    ("GET", DASHBOARD_PATH),
)


def private_dir(path: Path) -> Path:
    """Create (or tighten) a folder only its owner may enter: it holds the token, the database and job logs."""
    path.mkdir(parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def write_token(state_dir: Path) -> str:
    """A fresh secret for this service process, written atomically with mode 0600 (a token captured from an
    earlier run is worthless once the service restarts)."""
    private_dir(state_dir)
    token = secrets.token_urlsafe(32)
    tmp = state_dir / f".{TOKEN_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    tmp.replace(state_dir / TOKEN_FILE)
    return token


def job_row(service: Service, state: JobState, now: float) -> dict[str, Any]:
    """One job as `pollux ls` shows it."""
    report = service.report(state.name)
    goodput, efficiency = report_metrics(report)
    return {
        "name": state.name,
        "status": state.status,
        "gpus": sum(state.allocation),
        "gpu_type": state.gpu_type if sum(state.allocation) else None,
        "placement": list(placement(tuple(state.allocation))),
        "allocation": list(state.allocation),
        "batch_size": report.batch.total_batch_size if report else None,
        "local_bsz": report.batch.local_bsz if report else None,
        "accum_steps": report.batch.accum_steps if report else None,
        "epoch": report.progress.epoch if report else None,
        "goodput": goodput,
        "efficiency": efficiency,
        "restarts": state.restarts,
        "attempts": state.attempts,
        "submitted_at": state.submitted_at,
        "age_s": max(now - state.submitted_at, 0.0),
        "reason": service.reason(state.name) if state.status == "pending" else "",
        "last_error": state.last_error,
    }


class ApiServer:
    """Serves one `Service` on a background thread."""

    def __init__(self, service: Service, token: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.service = service
        self.token = token
        self.sessions = Sessions()
        handler = type("Handler", (_Handler,), {"api": self})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="pollux-api", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def cookie_name(self) -> str:
        """Per port: browsers share cookies between the ports of one host, and two services may run side by side."""
        return f"pollux_session_{self.httpd.server_address[1]}"

    def authorized(self, method: str, authorization: str, cookie_header: str) -> bool:
        """The one access check: the token as `Authorization: Bearer`, or (for a GET only) a dashboard session."""
        given = authorization.removeprefix("Bearer ").strip()
        if given and hmac.compare_digest(given.encode(), self.token.encode()):
            return True
        return method == "GET" and self.sessions.valid(self.session_of(cookie_header))

    def session_of(self, cookie_header: str) -> str:
        try:
            morsel = SimpleCookie(cookie_header).get(self.cookie_name)
        except CookieError:
            return ""
        return morsel.value if morsel is not None else ""

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- routes -----------------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        service = self.service
        now = service.clock()
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[:1] != ["v1"]:
            return HTTPStatus.NOT_FOUND, {"error": f"no route {path}; routes start with /v1/"}
        route = parts[1:]
        if method == "GET" and route == ["health"]:
            cluster = service.capacity()
            return HTTPStatus.OK, {
                "ok": True,
                "pid": os.getpid(),
                "policy": service.config.policy,
                "backend": type(service.launcher).__name__,
                "nodes": cluster.num_nodes,
                "gpus_per_node": cluster.gpus_per_node if cluster.uniform else None,  # None: see node_gpus
                "node_gpus": list(cluster.node_gpus),
                "node_types": list(cluster.node_types),
                "rounds": service.rounds,
            }
        if method == "GET" and route == ["jobs"]:
            return HTTPStatus.OK, {"jobs": [job_row(service, s, now) for s in service.store.jobs()]}
        if method == "POST" and route == ["jobs"]:
            if not isinstance(body, dict) or not isinstance(body.get("spec"), str):
                return HTTPStatus.BAD_REQUEST, {"error": "body must be JSON with 'spec' (TOML text)"}
            base = Path(body.get("base") or Path.cwd())
            spec = loads_spec(body["spec"], str(body.get("source") or "<spec>"), base)
            state = service.submit(spec)
            return HTTPStatus.CREATED, job_row(service, state, now)
        if len(route) >= 2 and route[0] == "jobs":
            state = service.store.job(route[1])
            if method == "GET" and len(route) == 2:
                report = service.store.report(state.name)
                return HTTPStatus.OK, {
                    **job_row(service, state, now),
                    "history": [{"at": at, "status": s, "reason": r} for at, s, r in service.store.history(state.name)],
                    "report": report,
                }
            if method == "GET" and route[2:] == ["logs"]:
                cursor = query.get("cursor", [""])[0]
                partial = query.get("partial", ["0"])[0] == "1"
                try:
                    text, cursor = joblog.read_merged(service.config.log_dir(state.name), cursor, partial=partial)
                except ValueError as error:
                    return HTTPStatus.BAD_REQUEST, {"error": str(error)}
                return HTTPStatus.OK, {"text": text, "cursor": cursor}
            if method == "POST" and route[2:] == ["cancel"]:
                service.cancel(state.name)
                return HTTPStatus.OK, job_row(service, service.store.job(state.name), now)
        if method == "POST" and route == ["shutdown"]:
            service.request_shutdown()
            return HTTPStatus.ACCEPTED, {"ok": True}
        if route[:1] == ["dashboard"]:
            return self._dashboard(method, route[1:], now)
        return HTTPStatus.NOT_FOUND, {"error": f"no route {method} {path}"}

    def _dashboard(self, method: str, route: list[str], now: float) -> tuple[int, Any]:
        """The dashboard's JSON (`pollux.dashboard.views`) and its login links."""
        service = self.service
        if method == "GET" and not route:
            rows = [job_row(service, s, now) for s in service.store.jobs()]
            return HTTPStatus.OK, views.overview(service, rows, now)
        if method == "GET" and len(route) == 2 and route[0] == "jobs":
            return HTTPStatus.OK, views.job_detail(service, job_row(service, service.store.job(route[1]), now))
        if method == "POST" and route == ["link"]:
            return HTTPStatus.OK, {"url": f"{self.url}{LOGIN_PATH}?code={self.sessions.new_code()}"}
        return HTTPStatus.NOT_FOUND, {"error": f"no route {method} /v1/dashboard/{'/'.join(route)}"}

    def page(self, method: str, path: str) -> tuple[int, Callable[[str], str]]:
        """An HTML page for an authorized browser, as a function of the response's script nonce."""
        if method == "GET" and path in ("/", "/ui", DASHBOARD_PATH):
            return HTTPStatus.OK, pages.dashboard_page
        message = f"no page {method} {path}: the dashboard is at {DASHBOARD_PATH}"
        return HTTPStatus.NOT_FOUND, lambda nonce: pages.login_page(nonce, str(self.token_path), message)

    @property
    def token_path(self) -> Path:
        return self.service.config.state_dir / TOKEN_FILE


class _Handler(BaseHTTPRequestHandler):
    api: ApiServer
    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle or trickling client cannot hold a thread forever

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        """Check the token before reading anything else, bound the body, answer every error with one line."""
        url = urlsplit(self.path)
        if url.path.rstrip("/") == LOGIN_PATH:
            self._login(method, url.query)
            return
        if not self.api.authorized(method, self.headers.get("Authorization", ""), self.headers.get("Cookie", "")):
            self.close_connection = True
            if not url.path.startswith("/v1/"):  # a browser: the login form, and nothing else
                self._send_html(HTTPStatus.UNAUTHORIZED, lambda nonce: self._login_page(nonce, ""))
                return
            self._send(
                HTTPStatus.UNAUTHORIZED, {"error": f"missing or wrong token: send the one in {self.api.token_path}"}
            )
            return
        if not url.path.startswith("/v1/"):
            self._send_html(*self.api.page(method, url.path))
            return
        raw = self._body()
        if raw is None:
            return
        try:
            body = json.loads(raw) if raw else None
            status, payload = self.api.handle(method, url.path, parse_qs(url.query), body)
        except UnknownJobError as error:
            status, payload = HTTPStatus.NOT_FOUND, {"error": str(error)}
        except (PolluxError, ValueError) as error:
            status, payload = HTTPStatus.BAD_REQUEST, {"error": str(error)}
        except Exception as error:  # a bug: log it, answer, keep serving
            LOG.exception("API request %s %s failed", method, url.path)
            status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {type(error).__name__}"}
        self._send(status, payload)

    def _body(self) -> bytes | None:
        """The request's body, at most `MAX_BODY` bytes (None: refused, answered)."""
        length_header = self.headers.get("Content-Length") or "0"
        if not length_header.isdigit() or int(length_header) > MAX_BODY:
            self.close_connection = True
            self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"body must be 0-{MAX_BODY} bytes"})
            return None
        return self.rfile.read(int(length_header))

    def _login_page(self, nonce: str, message: str) -> str:
        return pages.login_page(nonce, str(self.api.token_path), message)

    def _login(self, method: str, query: str) -> None:
        """The one route open without credentials: a one-time link's code (GET) or the token from the form (POST)
        becomes a session cookie and a redirect to the dashboard; anything else gets the form, and no data."""
        sessions = self.api.sessions
        session = None
        message = ""
        if method == "GET" and (code := parse_qs(query).get("code", [""])[0]):
            session = sessions.redeem(code)
            message = "" if session else "this link was used already or has expired: run `pollux dashboard` again"
        elif method == "POST":
            raw = self._body()
            if raw is None:
                return
            token = parse_qs(raw.decode("utf-8", errors="replace")).get("token", [""])[0].strip()
            if self.api.authorized("POST", f"Bearer {token}", ""):
                session = sessions.open()
            else:
                message = "wrong token"
        if session is None:
            status = HTTPStatus.UNAUTHORIZED if message else HTTPStatus.OK
            self._send_html(status, lambda nonce: self._login_page(nonce, message))
            return
        cookie = f"{self.api.cookie_name}={session}; Path=/; HttpOnly; SameSite=Strict"
        self.send_response(HTTPStatus.SEE_OTHER)
        self.send_header("Location", DASHBOARD_PATH)
        self.send_header("Set-Cookie", cookie)
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send_html(self, status: int, render: Callable[[str], str]) -> None:
        """An HTML page under a fresh script nonce: only the page's own inline scripts run, it cannot be framed,
        and it reaches nothing but this server."""
        nonce = secrets.token_urlsafe(16)
        data = render(nonce).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header(
            "Content-Security-Policy",
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; "
            "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        )
        self.end_headers()
        self.wfile.write(data)

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        LOG.debug("%s " + format, self.address_string(), *args)


def write_endpoint(state_dir: Path, url: str) -> None:
    """Tell clients where the service listens and which process it is (atomic: no reader sees half a file)."""
    path = state_dir / ENDPOINT_FILE
    tmp = path.with_suffix(".tmp")
    endpoint = {"url": url, "pid": os.getpid(), "start_ticks": process_start_ticks(os.getpid()), "host": _HOST}
    tmp.write_text(json.dumps(endpoint), encoding="utf-8")
    tmp.replace(path)


def _read_private(path: Path) -> str:
    """A file of the state directory; another user's directory is refused with the fix, not a traceback."""
    try:
        return path.read_text(encoding="utf-8")
    except PermissionError:
        raise ServiceError(
            f"cannot read {path}: permission denied; run as the user who started `pollux up` (its state directory "
            "is private), or pass your own --state-dir"
        ) from None


class Client:
    """The CLI's side of the API; every failure is a `ServiceError` with a one-line reason (a `SchedulerDownError`
    when no scheduler answers at all)."""

    def __init__(self, state_dir: Path, timeout_s: float = 30.0) -> None:
        self.state_dir = state_dir
        self.timeout_s = timeout_s
        down = SchedulerDownError(
            f"no Pollux scheduler runs on {state_dir}: start one with `pollux up` (or pass the same --state-dir)"
        )
        try:
            endpoint = json.loads(_read_private(state_dir / ENDPOINT_FILE))
            self.url = str(endpoint["url"])
        except (FileNotFoundError, KeyError, json.JSONDecodeError):
            raise down from None
        # a service killed with -9 leaves its endpoint behind: never send the token to whoever took the port since
        if endpoint.get("host") == _HOST and process_start_ticks(int(endpoint["pid"])) != endpoint.get("start_ticks"):
            raise down
        token_path = state_dir / TOKEN_FILE
        try:
            self.token = _read_private(token_path).strip()
        except FileNotFoundError:
            pid = endpoint.get("pid")
            raise ServiceError(
                f"the token file {token_path} is missing: the scheduler running on {state_dir} (pid {pid}) accepts "
                f"no request without it; stop it (`kill {pid}`: its jobs checkpoint) and start `pollux up` again, "
                "which writes a new token (or check --state-dir)"
            ) from None

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            try:
                message = json.loads(error.read()).get("error", error.reason)
            except (json.JSONDecodeError, AttributeError):
                message = error.reason
            raise ServiceError(str(message)) from None
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as error:
            raise SchedulerDownError(
                f"the scheduler at {self.url} does not answer ({error}); is `pollux up` running? "
                f"(state dir {self.state_dir})"
            ) from None

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/health")

    def submit(self, spec_path: Path) -> dict[str, Any]:
        try:
            text = spec_path.read_text(encoding="utf-8")
        except (FileNotFoundError, UnicodeDecodeError) as error:
            raise ServiceError(f"{spec_path}: cannot read the spec ({error})") from None
        body = {"spec": text, "source": str(spec_path), "base": str(spec_path.resolve().parent)}
        return self.request("POST", "/v1/jobs", body)

    def jobs(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/jobs")["jobs"]

    def job(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/jobs/{name}")

    def logs(self, name: str, cursor: str = "", *, partial: bool = False) -> tuple[str, str]:
        """Log lines written since `cursor` (every rank's, prefixed), and the cursor after them; `partial` also
        returns unfinished last lines (for a job that ended)."""
        query = urlencode({"cursor": cursor, "partial": int(partial)})
        reply = self.request("GET", f"/v1/jobs/{name}/logs?{query}")
        return reply["text"], reply["cursor"]

    def cancel(self, name: str) -> dict[str, Any]:
        return self.request("POST", f"/v1/jobs/{name}/cancel")

    def shutdown(self) -> None:
        self.request("POST", "/v1/shutdown")

    def dashboard_link(self) -> str:
        """A one-time login link to the dashboard (it expires in minutes; the token itself never enters a URL)."""
        return str(self.request("POST", "/v1/dashboard/link")["url"])

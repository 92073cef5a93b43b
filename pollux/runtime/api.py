"""The service's HTTP API: JSON over HTTP/1.1, a Starlette app that uvicorn serves from a thread of `pollux up`.

`ROUTE_TABLE` is the whole map; the OpenAPI description at `/v1/openapi.json` is generated from it (the routes'
paths, methods, docstrings and who may call them). Every request carries `Authorization: Bearer <token>`. The admin
token is a random secret that each `pollux up` writes to `<state_dir>/token` with mode 0600 (the folder is 0700), so
only the user who started the service (and root) holds it; it may do everything. A tenant's token (`pollux tenant
add`, `pollux.runtime.tokens`) reaches only its own tenant's jobs: every route but the login form declares its
`Action`, and `_Access` holds it to the one rule of `pollux.runtime.access` (403 otherwise). The server binds
127.0.0.1 unless told otherwise; beyond loopback it serves HTTPS only (`pollux up --listen --tls-cert --tls-key`).

A browser proves itself once, with the token typed into the login form or with a one-time link, and then holds a
session cookie (HttpOnly, SameSite=Strict) that is good for GET requests only: everything that changes state still
needs the token itself. Every route but the login form answers 401 without one or the other: one check, `_Guard`, in
front of every route, which also refuses a body over `MAX_BODY` bytes before reading it.

Errors come back as {"error": one line} with 400 (bad input), 401 (token), 403 (a tenant's token beyond its own
jobs), 404 (unknown job or route), 413 (body too large) or 500 (a bug, logged; the service keeps running). The CLI's
side is `pollux.runtime.client`.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import socket
import threading
import time
import tomllib
from collections.abc import Callable, Collection
from dataclasses import replace
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import h11
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.schemas import BaseSchemaGenerator
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol

from pollux.dashboard import pages
from pollux.dashboard.sessions import Sessions
from pollux.errors import AccessError, PolluxError, ServiceError, UnknownJobError
from pollux.runtime import access, joblog, views
from pollux.runtime.access import Action, Principal
from pollux.runtime.client import TOKEN_FILE, Client, write_endpoint, write_token
from pollux.runtime.service import Service
from pollux.runtime.spec import loads_spec, parse_spec
from pollux.runtime.tokens import TenantTokens, token_digest
from pollux.runtime.views import job_row

__all__ = ["ROUTES", "ROUTE_TABLE", "ApiServer", "Client", "job_row", "write_endpoint", "write_token"]

LOG = logging.getLogger("pollux.runtime.api")
MAX_BODY = 1 << 20
DASHBOARD_PATH = "/ui/"
LOGIN_PATH = "/ui/login"
OPENAPI_PATH = "/v1/openapi.json"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10  # requests in flight at `close` get this long to finish
CLOSE = {"Connection": "close"}


# -- responses --------------------------------------------------------------------------------------------------
def _json(payload: Any, status: int = HTTPStatus.OK, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(payload).encode(), status, headers, media_type="application/json")


def _error(status: int, message: str) -> Response:
    """One line for any refusal."""
    return _json({"error": message}, status)


def _too_large() -> Response:
    """The refusal of a body over `MAX_BODY`, left unread: the connection closes (it cannot carry another request)."""
    return _json({"error": f"body must be 0-{MAX_BODY} bytes"}, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, CLOSE)


def _html(status: int, render: Callable[[str], str]) -> Response:
    """An HTML page under a fresh script nonce: only the page's own inline scripts run, it cannot be framed, and it
    reaches nothing but this server."""
    nonce = secrets.token_urlsafe(16)
    headers = {
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": (
            f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; "
            "img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
    }
    return HTMLResponse(render(nonce), status, headers)


def _login_form(api: ApiServer, status: int, message: str) -> Response:
    return _html(status, lambda nonce: pages.login_page(nonce, str(api.token_path), message))


def _api(request: Request) -> ApiServer:
    api: ApiServer = request.app.state.api
    return api


def _principal(request: Request) -> Principal:
    """Who sent the request (`_Guard` found it)."""
    principal: Principal = request.state.principal
    return principal


async def _body(request: Request) -> bytes:
    """The request's body, at most `MAX_BODY` bytes (the guard refused a longer Content-Length unread; this bounds a
    chunked one)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise HTTPException(HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    return bytes(body)


# -- the API's routes (sync ones run in Starlette's thread pool: the store and the service block) -----------------
def health(request: Request) -> Response:
    """The service, its backend and policy, and the cluster it schedules."""
    return _json(views.health(_api(request).service))


def list_jobs(request: Request) -> Response:
    """Every job, one row each (what `pollux ls` prints).
    A tenant's token gets its own tenant's rows, and every tenant's unfinished jobs as counts (`tenants`)."""
    service, principal = _api(request).service, _principal(request)
    now, jobs = service.clock(), service.store.jobs()
    answer: dict[str, Any] = {"jobs": [job_row(service, job, now) for job in access.visible(principal, jobs)]}
    if not principal.admin:
        answer["tenants"] = access.tenant_counts(jobs)
    return _json(answer)


async def submit_job(request: Request) -> Response:
    """Submit a job: {"spec": TOML text, or the same fields as a JSON object, "source": file name, "base": folder,
    "tenant": optional, overrides the spec's}; answers the new job's row (201). A tenant's token submits for its own
    tenant (a spec naming none gets it; one naming another is refused)."""
    raw = await _body(request)
    body = json.loads(raw) if raw else None
    if not isinstance(body, dict) or not isinstance(body.get("spec"), str | dict):
        raise ServiceError("body must be JSON with 'spec' (TOML text, or a JSON object of the same fields)")
    answer = await run_in_threadpool(_submit, _api(request).service, _principal(request), body)
    return _json(answer, HTTPStatus.CREATED)


def _submit(service: Service, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
    now = service.clock()
    named = body.get("tenant")
    if named is not None and not isinstance(named, str):
        raise ServiceError("'tenant' must be a string: a tenant's name")
    source, base = str(body.get("source") or "<spec>"), Path(body.get("base") or Path.cwd())
    given = body["spec"]
    if isinstance(given, str):
        spec = loads_spec(given, source, base, named)
        fields = tomllib.loads(given)  # read: it parsed
    else:
        spec = parse_spec(given if named is None else {**given, "tenant": named}, source, base)
        fields = given
    tenant = access.submitted_tenant(principal, named or fields.get("tenant"))
    if tenant != spec.tenant:
        spec = replace(spec, tenant=tenant)
    return job_row(service, service.submit(spec), now)


def show_job(request: Request) -> Response:
    """A job's row, its status history and its last report (`pollux ls NAME`)."""
    service = _api(request).service
    return _json(views.job_status(service, request.path_params["name"], service.clock()))


def job_logs(request: Request) -> Response:
    """Log lines since `?cursor=C` (every rank's, prefixed) and the next cursor; `&partial=1` adds unfinished last
    lines."""
    service = _api(request).service
    name = service.store.job(request.path_params["name"]).name
    partial = request.query_params.get("partial", "0") == "1"
    cursor = request.query_params.get("cursor", "")
    text, cursor = joblog.read_merged(service.config.log_dir(name), cursor, partial=partial)
    return _json({"text": text, "cursor": cursor})


def job_metrics(request: Request) -> Response:
    """The metrics the job's script reported (`pollux.agent.metrics`) past position `?after=N` (default: all), with
    the job's row and the GPU-seconds it has held: what `pollux tune` polls for each trial."""
    service = _api(request).service
    after = request.query_params.get("after", "-1")
    if not after.lstrip("-").isdigit():
        raise ServiceError(f"'after' must be an integer (a metrics position), got {after!r}")
    return _json(views.job_metrics(service, request.path_params["name"], int(after), service.clock()))


def cancel_job(request: Request) -> Response:
    """Stop a job for good (it checkpoints first); answers its row."""
    service = _api(request).service
    now = service.clock()
    return _json(job_row(service, service.cancel(request.path_params["name"]), now))


def remove_job(request: Request) -> Response:
    """Remove a finished job (completed, failed or cancelled) so that its name can be used again; its history stays
    in the store's events. Answers its name and final status; a job that may still run is refused (cancel it)."""
    service = _api(request).service
    name = request.path_params["name"]
    return _json({"name": name, "status": service.remove(name)})


def shutdown(request: Request) -> Response:
    """Stop the service (202); jobs checkpoint and resume at the next `pollux up`."""
    _api(request).service.request_shutdown()
    return _json({"ok": True}, HTTPStatus.ACCEPTED)


def tenants(request: Request) -> Response:
    """Every tenant's GPUs per type: held, guaranteed, and the last round's demand, entitlement and budget."""
    return _json(views.tenant_usage(_api(request).service))


def dashboard(request: Request) -> Response:
    """The dashboard's poll: the cluster, every job's row, recent rounds.
    A tenant's session sees its own tenant's jobs and decisions, and the others' as counts."""
    service, principal = _api(request).service, _principal(request)
    overview = views.overview(service, service.clock())
    return _json(overview if principal.admin else access.overview_for(principal, overview, service.store.jobs()))


def dashboard_job(request: Request) -> Response:
    """A job's dashboard page: its row, goodput, batch and GPUs over time, history, log tail."""
    service = _api(request).service
    return _json(views.job_page(service, request.path_params["name"], service.clock()))


def dashboard_link(request: Request) -> Response:
    """A one-time login link for a browser (`pollux dashboard`), to a session that sees what the token sees; it
    expires in two minutes."""
    api = _api(request)
    return _json({"url": f"{api.url}{LOGIN_PATH}?code={api.sessions.new_code(request.state.who)}"})


async def openapi(request: Request) -> Response:
    """This API's OpenAPI description, generated from its routes."""
    return _json(_OpenAPI().get_schema(list(request.app.routes)))


# -- the browser's routes --------------------------------------------------------------------------------------
async def dashboard_page(request: Request) -> Response:
    """The dashboard page (HTML), for a browser with a session."""
    return _html(HTTPStatus.OK, pages.dashboard_page)


async def login(request: Request) -> Response:
    """The one route open without credentials: a one-time link's code (GET) or the token from the form (POST)
    becomes a session cookie and a redirect to the dashboard; anything else gets the form, and no data."""
    api = _api(request)
    session = None
    message = ""
    if request.method == "GET" and (code := request.query_params.get("code", "")):
        session = api.sessions.redeem(code)
        message = "" if session else "this link was used already or has expired: run `pollux dashboard` again"
    elif request.method == "POST":
        raw = await _body(request)
        token = parse_qs(raw.decode("utf-8", errors="replace")).get("token", [""])[0].strip()
        if found := await api.identify("POST", f"Bearer {token}", ""):
            session = api.sessions.open(found[1])
        else:
            message = "wrong token"
    if session is None:
        return _login_form(api, HTTPStatus.UNAUTHORIZED if message else HTTPStatus.OK, message)
    headers = {
        "Location": DASHBOARD_PATH,
        "Set-Cookie": f"{api.cookie_name}={session}; Path=/; HttpOnly; SameSite=Strict",
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
    }
    return Response(status_code=HTTPStatus.SEE_OTHER, headers=headers)


class _Access:
    """A route's access check, after routing (so a job's name is known) and before its endpoint: the route's action
    for the request's principal, and for a route about one job, that job's tenant (`pollux.runtime.access`)."""

    def __init__(self, app: ASGIApp, action: Action) -> None:
        self.app = app
        self.action = action

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal: Principal = scope["state"]["principal"]
        name = scope.get("path_params", {}).get("name")
        tenant = None
        if name is not None and not principal.admin:  # an unknown job: 404, as for the admin
            job = await run_in_threadpool(scope["app"].state.api.service.store.job, name)
            tenant = access.job_tenant(job.spec)
        access.check(principal, self.action, tenant, name)
        await self.app(scope, receive, send)


class GuardedRoute(Route):
    """A route and its `Action`: every route but the login form is one."""

    def __init__(self, path: str, endpoint: Callable[..., Any], method: str, action: Action) -> None:
        super().__init__(path, endpoint, methods=[method], middleware=[Middleware(_Access, action=action)])
        self.action = action


ROUTE_TABLE: list[BaseRoute] = [
    GuardedRoute("/v1/health", health, "GET", Action.READ),
    GuardedRoute("/v1/jobs", list_jobs, "GET", Action.READ),
    GuardedRoute("/v1/jobs", submit_job, "POST", Action.SUBMIT),
    GuardedRoute("/v1/jobs/{name}", show_job, "GET", Action.READ_JOB),
    GuardedRoute("/v1/jobs/{name}/logs", job_logs, "GET", Action.READ_JOB),
    GuardedRoute("/v1/jobs/{name}/metrics", job_metrics, "GET", Action.READ_JOB),
    GuardedRoute("/v1/jobs/{name}/cancel", cancel_job, "POST", Action.CHANGE_JOB),
    GuardedRoute("/v1/jobs/{name}/remove", remove_job, "POST", Action.CHANGE_JOB),
    GuardedRoute("/v1/shutdown", shutdown, "POST", Action.SHUTDOWN),
    GuardedRoute("/v1/tenants", tenants, "GET", Action.READ),
    GuardedRoute("/v1/dashboard", dashboard, "GET", Action.READ),
    GuardedRoute("/v1/dashboard/jobs/{name}", dashboard_job, "GET", Action.READ_JOB),
    GuardedRoute("/v1/dashboard/link", dashboard_link, "POST", Action.LOGIN_LINK),
    GuardedRoute(OPENAPI_PATH, openapi, "GET", Action.READ),
    GuardedRoute("/", dashboard_page, "GET", Action.READ),
    GuardedRoute("/ui", dashboard_page, "GET", Action.READ),
    GuardedRoute(DASHBOARD_PATH, dashboard_page, "GET", Action.READ),
    Route(LOGIN_PATH, login, methods=["GET", "POST"]),
]
# (method, path) of every route that needs credentials (NAME: any job), for the tests that walk them all
ROUTES = tuple(
    (method, route.path.replace("{name}", "NAME"))
    for route in ROUTE_TABLE
    if isinstance(route, Route) and route.path != LOGIN_PATH
    for method in sorted((route.methods or set()) - {"HEAD"})
)


class _OpenAPI(BaseSchemaGenerator):
    """OpenAPI 3.1 from the routes: each operation's summary and description are its endpoint's docstring, and
    `x-access` says who may call it."""

    def get_schema(self, routes: list[BaseRoute]) -> dict[str, Any]:
        paths: dict[str, dict[str, Any]] = {}
        actions = {
            (r.path, m.lower()): r.action for r in routes if isinstance(r, GuardedRoute) for m in r.methods or ()
        }
        for endpoint in self.get_endpoints(routes):
            summary, _, description = (endpoint.func.__doc__ or "").partition("\n")
            names = [part[1:-1] for part in endpoint.path.split("/") if part.startswith("{")]
            operation: dict[str, Any] = {
                "operationId": endpoint.func.__name__,
                "summary": summary.strip(),
                "parameters": [
                    {"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in names
                ],
                "responses": {
                    "2XX": {"description": "JSON" if endpoint.path.startswith("/v1/") else "HTML"},
                    "4XX": {
                        "description": 'JSON {"error": one line}: 400 bad input, 401 no or wrong token, 403 a '
                        "tenant's token beyond its own jobs, 404 unknown job or route, 413 body too large"
                    },
                },
            }
            if (action := actions.get((endpoint.path, endpoint.http_method))) is not None:
                operation["x-access"] = _ACCESS_TEXT[action]
            if description.strip():
                operation["description"] = " ".join(description.split())
            if endpoint.path == LOGIN_PATH:
                operation["security"] = []
            paths.setdefault(endpoint.path, {})[endpoint.http_method] = operation
        return {
            "openapi": "3.1.0",
            "info": {
                "title": "Pollux scheduler",
                "version": "1",
                "description": "The admin token may call every operation. A tenant's token (`pollux tenant add`) "
                "reaches its own tenant's jobs only (403 otherwise) and sees the others as counts; each operation's "
                "`x-access` says what it allows a tenant.",
            },
            "components": {
                "securitySchemes": {
                    "token": {
                        "type": "http",
                        "scheme": "bearer",
                        "description": f"the admin's: <state_dir>/{TOKEN_FILE}; a tenant's: `pollux tenant add`",
                    },
                    "session": {"type": "apiKey", "in": "cookie", "name": "pollux_session_<port>"},
                }
            },
            "security": [{"token": []}, {"session": []}],
            "paths": paths,
        }


_ACCESS_TEXT = {
    Action.READ: "any token; a tenant's sees its own tenant's jobs, the others' as counts",
    Action.SUBMIT: "any token; a tenant's submits for its own tenant only",
    Action.READ_JOB: "the admin's, or the job's tenant's",
    Action.CHANGE_JOB: "the admin's, or the job's tenant's",
    Action.LOGIN_LINK: "any token (the session sees what the token sees)",
    Action.SHUTDOWN: "the admin's only",
}


# -- errors: one line each --------------------------------------------------------------------------------------
async def _no_route(request: Request, error: Exception) -> Response:
    """404 for a path or method no route has (Starlette's 404 and 405 alike): JSON under /v1/, else the login page
    pointing to the dashboard."""
    method, path = request.method, request.url.path
    if path.startswith("/v1/"):
        return _error(HTTPStatus.NOT_FOUND, f"no route {method} {path}")
    return _login_form(_api(request), HTTPStatus.NOT_FOUND, f"no page {method} {path}: the dashboard is at /ui/")


async def _body_too_large(request: Request, error: Exception) -> Response:
    return _too_large()


async def _unknown_job(request: Request, error: Exception) -> Response:
    return _error(HTTPStatus.NOT_FOUND, str(error))


async def _forbidden(request: Request, error: Exception) -> Response:
    return _error(HTTPStatus.FORBIDDEN, str(error))


async def _bad_input(request: Request, error: Exception) -> Response:
    return _error(HTTPStatus.BAD_REQUEST, str(error))


ERROR_HANDLERS = {
    HTTPStatus.NOT_FOUND.value: _no_route,
    HTTPStatus.METHOD_NOT_ALLOWED.value: _no_route,
    HTTPStatus.REQUEST_ENTITY_TOO_LARGE.value: _body_too_large,
    UnknownJobError: _unknown_job,
    AccessError: _forbidden,
    PolluxError: _bad_input,
    ValueError: _bad_input,
}


class _Guard:
    """In front of every route: the credentials (a 401 without them, as JSON under /v1/, else the login form; the
    principal they prove goes into the request's state for `_Access`), a body's declared size (413 before reading
    it), and the last word on a bug (logged, answered with a 500)."""

    def __init__(self, app: ASGIApp, api: ApiServer) -> None:
        self.app = app
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path.startswith("/v1/") or path.rstrip("/") == LOGIN_PATH:  # a trailing slash is the same route
            path = scope["path"] = path.rstrip("/")
        headers = Headers(scope=scope)
        refusal = None
        if path != LOGIN_PATH:
            refusal = await self._credentials(scope, headers)
        if refusal is not None:
            refusal.headers.update(CLOSE)  # nothing more on this connection, and its body stays unread
            await refusal(scope, receive, send)
        elif int(headers.get("content-length", "0")) > MAX_BODY:  # h11 let only digits through (`_Protocol`)
            await _too_large()(scope, receive, send)
        else:
            await self._serve(scope, receive, send)

    async def _credentials(self, scope: Scope, headers: Headers) -> Response | None:
        """The refusal of a request without credentials (401) or with a tenant's the service does not know (403);
        None, with the principal in the request's state, for one that may go on."""
        found = await self.api.identify(scope["method"], headers.get("authorization", ""), headers.get("cookie", ""))
        if found is None:
            status = HTTPStatus.UNAUTHORIZED
            problem = f"missing or wrong token: send the one in {self.api.token_path} or a tenant's"
        else:
            try:
                access.check_enrolled(found[0], self.api.tenant_names)
                scope.setdefault("state", {}).update(principal=found[0], who=found[1])
                return None
            except AccessError as error:
                status, problem = HTTPStatus.FORBIDDEN, str(error)
        if scope["path"].startswith("/v1/"):
            return _error(status, problem)
        return _login_form(self.api, status, "" if status == HTTPStatus.UNAUTHORIZED else problem)  # a browser

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as error:  # a bug: log it, answer, keep serving
            LOG.exception("API request %s %s failed", scope["method"], scope["path"])
            if started:
                raise
            await _error(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error: {type(error).__name__}")(
                scope, receive, send
            )


# -- the server -------------------------------------------------------------------------------------------------
class _Connection(h11.Connection):
    """h11's connection, keeping why it refused a request (uvicorn answers every refusal alike)."""

    refusal = ""

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as error:
            self.refusal = str(error)
            raise


class _Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 (h11), with the API's answer to a request it cannot parse: one JSON line, and for a
    Content-Length that is no byte count the 413 of any body the API will not read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        size = self.config.h11_max_incomplete_event_size
        self.conn = _Connection(h11.SERVER) if size is None else _Connection(h11.SERVER, size)

    def send_400_response(self, msg: str) -> None:
        refusal = self.conn.refusal if isinstance(self.conn, _Connection) else ""
        status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE if "Content-Length" in refusal else HTTPStatus.BAD_REQUEST
        message = f"body must be 0-{MAX_BODY} bytes" if status == 413 else f"malformed HTTP request ({refusal or msg})"
        data = json.dumps({"error": message}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            (b"connection", b"close"),
        ]
        for event in (h11.Response(status_code=status, headers=headers, reason=STATUS_PHRASES[status]), h11.Data(data)):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.write(self.conn.send(h11.EndOfMessage()) or b"")
        self.transport.close()


class ApiServer:
    """Serves one `Service` on a background thread: uvicorn runs the app on a socket bound here (a port in use
    fails now, before the service starts anything)."""

    def __init__(
        self,
        service: Service,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        tls: tuple[Path, Path] | None = None,
        tenant_names: Collection[str] | None = None,
    ) -> None:
        """`token` is the admin's; `tls` (certificate, key) serves HTTPS; `tenant_names`, where the service runs
        with a tenants file, are the tenants whose tokens it accepts."""
        self.service = service
        self._admin = token_digest(token)
        self.tls = tls
        self.tenant_names = tenant_names
        self._tokens: TenantTokens | None = None  # opened at the first token that is not the admin's
        self._tokens_lock = threading.Lock()
        self.sessions = Sessions()
        self.socket = socket.create_server((host, port))
        self.app = Starlette(
            routes=ROUTE_TABLE, middleware=[Middleware(_Guard, api=self)], exception_handlers=ERROR_HANDLERS
        )
        self.app.state.api = self
        config = uvicorn.Config(
            self.app,
            http=_Protocol,
            lifespan="off",
            log_config=None,  # the service's own logging; uvicorn says only what goes wrong
            log_level=logging.WARNING,
            access_log=False,
            server_header=False,
            timeout_graceful_shutdown=STOP_TIMEOUT_S,
            ssl_certfile=tls[0] if tls else None,
            ssl_keyfile=tls[1] if tls else None,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, args=([self.socket],), name="pollux-api", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        host = f"[{host}]" if ":" in str(host) else host
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"

    @property
    def cookie_name(self) -> str:
        """Per port: browsers share cookies between the ports of one host, and two services may run side by side."""
        return f"pollux_session_{self.socket.getsockname()[1]}"

    @property
    def token_path(self) -> Path:
        return self.service.config.state_dir / TOKEN_FILE

    async def identify(self, method: str, authorization: str, cookie_header: str) -> tuple[Principal, str] | None:
        """Who sends a request, and the digest of the token that proves it: the token as `Authorization: Bearer`,
        or (for a GET only) a dashboard session opened with a token that is still good; None for neither."""
        given = authorization.removeprefix("Bearer ").strip()
        digests = [token_digest(given)] if given else []
        if method == "GET" and (who := self.sessions.who(self.session_of(cookie_header))):
            digests.append(who)
        for digest in digests:
            if hmac.compare_digest(digest.encode(), self._admin.encode()):
                return access.ADMIN, digest
            tenant = await run_in_threadpool(self._tenant_of, digest)
            if tenant is not None:
                return Principal(admin=False, tenant=tenant), digest
        return None

    def _tenant_of(self, digest: str) -> str | None:
        with self._tokens_lock:
            if self._tokens is None:
                self._tokens = TenantTokens(self.service.config.database)
        return self._tokens.tenant_of(digest)

    def session_of(self, cookie_header: str) -> str:
        try:
            morsel = SimpleCookie(cookie_header).get(self.cookie_name)
        except CookieError:
            return ""
        return morsel.value if morsel is not None else ""

    def start(self) -> None:
        """Serve from a thread, once uvicorn accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ServiceError(f"the API server on {self.url} did not start: see the scheduler's log")
            time.sleep(0.01)

    def close(self) -> None:
        """Stop serving: requests in flight get `STOP_TIMEOUT_S` to finish."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(STOP_TIMEOUT_S + 5)
        self.socket.close()
        with self._tokens_lock:
            if self._tokens is not None:
                self._tokens.close()

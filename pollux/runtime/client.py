"""The CLI's side of the HTTP API (`pollux.runtime.api`), and the state directory's files where a service and its
clients meet: the token (mode 0600) and the endpoint.

Standard library only: `pollux submit`, `ls` and `logs` start in a fraction of a second because they import neither
the server's framework nor the scheduler.

A service that serves HTTPS records its certificate in the endpoint; the client trusts it (besides the system's
authorities) and checks the host name against it, so a self-signed certificate works and nothing goes unverified.
`POLLUX_TOKEN` in the environment replaces the admin token of the state directory (a tenant's, from `pollux tenant
add`).
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from pollux.errors import SchedulerDownError, ServiceError
from pollux.runtime.processes import process_start_ticks

_HOST = socket.gethostname()
TOKEN_FILE = "token"
ENDPOINT_FILE = "endpoint.json"
TOKEN_ENV = "POLLUX_TOKEN"


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


def write_endpoint(state_dir: Path, url: str, certificate: Path | None = None) -> None:
    """Tell clients where the service listens, which process it is and (for HTTPS) the certificate to trust
    (atomic: no reader sees half a file)."""
    path = state_dir / ENDPOINT_FILE
    tmp = path.with_suffix(".tmp")
    endpoint = {"url": url, "pid": os.getpid(), "start_ticks": process_start_ticks(os.getpid()), "host": _HOST}
    if certificate is not None:
        endpoint["certificate"] = str(certificate.resolve())
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


def _tls_context(certificate: str | None) -> ssl.SSLContext:
    """Verification against the system's authorities and the service's own certificate, which may be self-signed
    or a leaf without its chain (a partial chain ends at a certificate trusted here)."""
    context = ssl.create_default_context()
    if certificate:
        try:
            context.load_verify_locations(certificate)
        except (OSError, ssl.SSLError) as error:
            raise ServiceError(
                f"cannot read the service's certificate {certificate} ({error}); is `pollux up` running?"
            ) from None
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


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
        self.tls = _tls_context(endpoint.get("certificate")) if self.url.startswith("https:") else None
        if os.environ.get(TOKEN_ENV):
            self.token = os.environ[TOKEN_ENV].strip()
            return
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
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.tls) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            try:
                message = json.loads(error.read()).get("error", error.reason)
            except (json.JSONDecodeError, AttributeError):
                message = error.reason
            raise ServiceError(str(message)) from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, ssl.SSLError):
                raise ServiceError(
                    f"the scheduler at {self.url} failed the TLS check ({error.reason}); its certificate must match "
                    "the one `pollux up --tls-cert` recorded in the state dir"
                ) from None
            raise self._down(error) from None
        except (http.client.HTTPException, ConnectionError, TimeoutError) as error:
            raise self._down(error) from None

    def _down(self, error: Exception) -> SchedulerDownError:
        return SchedulerDownError(
            f"the scheduler at {self.url} does not answer ({error}); is `pollux up` running? "
            f"(state dir {self.state_dir})"
        )

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/health")

    def submit(self, spec_path: Path, tenant: str | None = None) -> dict[str, Any]:
        """Submit the spec file; a `tenant` given overrides the spec's."""
        try:
            text = spec_path.read_text(encoding="utf-8")
        except (FileNotFoundError, UnicodeDecodeError) as error:
            raise ServiceError(f"{spec_path}: cannot read the spec ({error})") from None
        body = {"spec": text, "source": str(spec_path), "base": str(spec_path.resolve().parent)}
        return self.request("POST", "/v1/jobs", body if tenant is None else {**body, "tenant": tenant})

    def submit_spec(self, spec: dict[str, Any], source: str, base: Path) -> dict[str, Any]:
        """Submit a spec given as its fields (what a TOML spec reads into); paths in it are relative to `base`."""
        return self.request("POST", "/v1/jobs", {"spec": spec, "source": source, "base": str(base)})

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

    def metrics(self, name: str, after: int = -1) -> dict[str, Any]:
        """The job's row, GPU-seconds held, and its script's metrics past position `after`
        (`pollux.runtime.views.job_metrics`)."""
        return self.request("GET", f"/v1/jobs/{name}/metrics?{urlencode({'after': after})}")

    def tenants(self) -> dict[str, Any]:
        """Every tenant's GPUs per type (`pollux.runtime.views.tenant_usage`); no tenants without a tenants file."""
        return self.request("GET", "/v1/tenants")

    def cancel(self, name: str) -> dict[str, Any]:
        return self.request("POST", f"/v1/jobs/{name}/cancel")

    def remove(self, name: str) -> dict[str, Any]:
        """Remove a finished job (`pollux.runtime.removal`); its name and final status."""
        return self.request("POST", f"/v1/jobs/{name}/remove")

    def shutdown(self) -> None:
        self.request("POST", "/v1/shutdown")

    def dashboard_link(self) -> str:
        """A one-time login link to the dashboard (it expires in minutes; the token itself never enters a URL)."""
        return str(self.request("POST", "/v1/dashboard/link")["url"])

"""Who may touch what, over real HTTP on 127.0.0.1 against a real state database: a tenant's token reaches its own
tenant's jobs only (403 on any route about another's, and on shutting down), sees the others as counts, and is kept
only as a hash; the admin token reaches everything; a wrong token gets 401. The service's loop is not started: the
jobs stay where the test puts them."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_jobs import write_spec

from pollux.errors import ServiceError
from pollux.runtime.api import ROUTE_TABLE, ROUTES, ApiServer, Client, GuardedRoute, write_endpoint, write_token
from pollux.runtime.launcher import WorkerInfo
from pollux.runtime.local import LocalLauncher
from pollux.runtime.service import Service, ServiceConfig
from pollux.runtime.store import StateStore
from pollux.runtime.tokens import TenantTokens

Serve = Callable[..., tuple[Client, dict[str, str]]]


@pytest.fixture()
def serve(tmp_path: Path) -> Iterator[Serve]:
    """Starts the API of a service over two slots (its loop idle), with tokens for tenants vision and audio; gives
    the admin's client and the tenants' tokens."""
    servers: list[tuple[ApiServer, Service]] = []

    def start(tenant_names: tuple[str, ...] | None = None) -> tuple[Client, dict[str, str]]:
        teams = tmp_path / "tenants.toml"
        teams.write_text("".join(f'[[tenant]]\nname = "{name}"\n' for name in ("default", "vision", "audio")))
        config = ServiceConfig(
            state_dir=tmp_path / "state", policy="fifo", interval_s=0.5, tick_s=0.05, tenants_file=teams
        )
        service = Service(config, LocalLauncher(2, stop_grace_s=5.0))
        server = ApiServer(service, write_token(config.state_dir), tenant_names=tenant_names)
        servers.append((server, service))
        server.start()
        write_endpoint(config.state_dir, server.url)
        tokens = TenantTokens(config.database)
        issued = {name: tokens.issue(name, 1.0) for name in ("vision", "audio")}
        tokens.close()
        return Client(config.state_dir), issued

    yield start
    for server, service in servers:
        server.close()
        service.launcher.shutdown()
        service.store.close()


def call(client: Client, method: str, path: str, token: str | None, cookie: str = "") -> tuple[int, Any]:
    """One request with `token` (or none), its status and its JSON body."""
    data = b"{}" if method == "POST" else None
    request = urllib.request.Request(client.url + path, data=data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if cookie:
        request.add_header("Cookie", cookie)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def as_tenant(client: Client, token: str, monkeypatch: pytest.MonkeyPatch) -> Client:
    """The CLI's client with a tenant's token, as `POLLUX_TOKEN` gives it."""
    with monkeypatch.context() as env:
        env.setenv("POLLUX_TOKEN", token)
        return Client(client.state_dir)


def submit_jobs(admin: Client, tokens: dict[str, str], folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """v1 (vision, named by its token), a1 (audio, naming itself), d1 (the admin's, of the default tenant)."""
    (folder / "counter.py").write_text("pass\n")
    as_tenant(admin, tokens["vision"], monkeypatch).submit(write_spec(folder, "v1"))
    as_tenant(admin, tokens["audio"], monkeypatch).submit(write_spec(folder, "a1", tenant="audio"))
    admin.submit(write_spec(folder, "d1"))


def test_a_tenant_reaches_its_own_jobs_only_and_sees_the_others_as_counts(serve, tmp_path, monkeypatch):
    admin, tokens = serve()
    submit_jobs(admin, tokens, tmp_path, monkeypatch)
    vision = as_tenant(admin, tokens["vision"], monkeypatch)
    assert [row["name"] for row in vision.jobs()] == ["v1"]
    assert [row["name"] for row in admin.jobs()] == ["v1", "a1", "d1"]
    status, listing = call(admin, "GET", "/v1/jobs", tokens["vision"])
    assert status == 200 and set(listing["tenants"]) == {"vision", "audio", "default"}
    assert listing["tenants"]["audio"] == {"running": 0, "pending": 1, "gpus": 0, "gpus_by_type": {}}
    assert "a1" not in json.dumps(listing) and "d1" not in json.dumps(listing)
    assert "tenants" not in call(admin, "GET", "/v1/jobs", admin.token)[1]  # the admin's answer is as before

    job_routes = [(method, path) for method, path in ROUTES if "NAME" in path]
    assert len(job_routes) == 6  # every route about one job (the metrics route came with `pollux tune`)
    for method, path in job_routes:
        for other in ("a1", "d1"):
            status, body = call(admin, method, path.replace("NAME", other), tokens["vision"])
            assert status == 403, (method, path, other, body)
            assert "tenant 'vision' may not" in body["error"] and other in body["error"], body
        status, body = call(admin, method, path.replace("NAME", "v1"), tokens["vision"])
        assert status in (200, 400), (method, path, body)  # its own: served (a pending job is not removable)
        assert call(admin, method, path.replace("NAME", "ghost"), tokens["vision"])[0] == 404
    with pytest.raises(ServiceError, match="tenant 'vision' may not shut the service down"):
        vision.shutdown()
    assert admin.health()["ok"]
    with pytest.raises(ServiceError, match="may not submit a job: a job of tenant 'audio'"):
        vision.submit(write_spec(tmp_path, "v2", tenant="audio"))
    assert vision.submit(write_spec(tmp_path, "v3", tenant="vision"))["name"] == "v3"
    assert admin.cancel("a1")["name"] == "a1"  # the admin's token reaches every job
    for token in ("wrong", None, hashlib.sha256(tokens["vision"].encode()).hexdigest()):
        status, body = call(admin, "GET", "/v1/jobs", token)
        assert status == 401 and "token" in body["error"], body


def test_tokens_are_stored_hashed_replaced_by_add_and_refused_once_revoked(serve, tmp_path):
    admin, _ = serve()

    def tenant(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pollux", "tenant", *args, "--state-dir", str(admin.state_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    added = tenant("add", "speech")
    assert added.returncode == 0, added.stderr
    first = added.stdout.strip()
    assert len(first) >= 43 and "\n" not in first  # 32 random bytes, alone on stdout
    assert call(admin, "GET", "/v1/jobs", first) == (200, {"jobs": [], "tenants": {}})  # the running service
    second = tenant("add", "speech").stdout.strip()
    assert call(admin, "GET", "/v1/jobs", first)[0] == 401 and call(admin, "GET", "/v1/jobs", second)[0] == 200
    files = [path for path in admin.state_dir.iterdir() if path.name.startswith("state.db")]
    stored = b"".join(path.read_bytes() for path in files)
    for token in (first, second):
        assert token.encode() not in stored
    assert hashlib.sha256(second.encode()).hexdigest().encode() in stored
    listed = tenant("ls")
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["audio", "speech", "vision"]
    assert second not in listed.stdout
    revoked = tenant("revoke", "speech")
    assert revoked.returncode == 0 and call(admin, "GET", "/v1/jobs", second)[0] == 401
    again = tenant("revoke", "speech")
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "holds no token" in again.stderr
    bad = tenant("add", "Not A Name")
    assert bad.returncode == 2 and "tenant name 'Not A Name'" in bad.stderr


def test_a_tenant_missing_from_the_tenants_file_is_refused_with_the_list(serve):
    admin, tokens = serve(tenant_names=("vision", "speech"))
    assert call(admin, "GET", "/v1/jobs", tokens["vision"])[0] == 200
    status, body = call(admin, "GET", "/v1/health", tokens["audio"])
    assert status == 403 and "tenant 'audio'" in body["error"] and "tenants: vision, speech" in body["error"], body
    assert admin.health()["ok"]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


def session(request: urllib.request.Request) -> str:
    """The session cookie a login (the form, or a one-time link) sets ('' if refused)."""
    try:
        urllib.request.build_opener(NoRedirect).open(request, timeout=10)
    except urllib.error.HTTPError as error:
        return error.headers.get("Set-Cookie", "").split(";")[0] if error.code == 303 else ""
    return ""


def login(client: Client, token: str) -> str:
    return session(urllib.request.Request(f"{client.url}/ui/login", data=f"token={token}".encode(), method="POST"))


def test_a_tenants_dashboard_session_sees_its_own_jobs_and_the_others_gpus_as_counts(serve, tmp_path, monkeypatch):
    admin, tokens = serve()
    submit_jobs(admin, tokens, tmp_path, monkeypatch)
    store = StateStore(admin.state_dir / "state.db")  # a1 launched on one slot, as a round records it
    store.record_launch("a1", (1,), [WorkerInfo(0, 0, 4242, "node-0", 1)], now=5.0, restart=False, gpu_type="cpu")
    store.close()
    assert login(admin, "wrong") == ""
    cookie = login(admin, tokens["vision"])
    assert cookie
    status, overview = call(admin, "GET", "/v1/dashboard", None, cookie)
    assert status == 200 and overview["tenant"] == "vision"
    assert [row["name"] for row in overview["jobs"]] == ["v1"]
    assert overview["held_by_others"] == [1]  # one node of two slots
    assert overview["tenant_counts"]["audio"]["gpus"] == 1 and overview["tenant_counts"]["audio"]["running"] == 1
    assert "a1" not in json.dumps(overview)
    assert call(admin, "GET", "/v1/dashboard/jobs/a1", None, cookie)[0] == 403
    assert call(admin, "GET", "/v1/dashboard/jobs/v1", None, cookie)[0] == 200
    assert call(admin, "POST", "/v1/shutdown", None, cookie)[0] == 401  # a session never changes anything
    # a link asked for with a tenant's token opens that tenant's session
    link = call(admin, "POST", "/v1/dashboard/link", tokens["audio"])[1]["url"]
    audio = session(urllib.request.Request(link))
    assert [row["name"] for row in call(admin, "GET", "/v1/dashboard", None, audio)[1]["jobs"]] == ["a1"]
    admin_cookie = login(admin, admin.token)
    assert len(call(admin, "GET", "/v1/dashboard", None, admin_cookie)[1]["jobs"]) == 3
    TenantTokens(admin.state_dir / "state.db").revoke("vision")
    assert call(admin, "GET", "/v1/dashboard", None, cookie)[0] == 401  # its token revoked: its sessions too


def test_every_route_but_the_login_form_declares_who_may_call_it(serve):
    admin, _ = serve()
    for route in ROUTE_TABLE:
        assert isinstance(route, GuardedRoute) or route.path == "/ui/login", route
    document = call(admin, "GET", "/v1/openapi.json", admin.token)[1]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert ("x-access" in operation) == (path != "/ui/login"), (method, path)
    assert document["paths"]["/v1/shutdown"]["post"]["x-access"] == "the admin's only"


@pytest.mark.e2e  # a real browser (headless Chromium)
def test_a_tenants_dashboard_page_names_its_own_jobs_and_greys_the_others_gpus(serve, tmp_path, monkeypatch):
    from benchmarks.headless import dump_dom

    admin, tokens = serve()
    submit_jobs(admin, tokens, tmp_path, monkeypatch)
    store = StateStore(admin.state_dir / "state.db")
    store.record_launch("a1", (1,), [WorkerInfo(0, 0, 4242, "node-0", 1)], now=5.0, restart=False, gpu_type="cpu")
    store.record_launch("v1", (1,), [WorkerInfo(0, 0, 4243, "node-0", 1)], now=5.0, restart=False, gpu_type="cpu")
    store.close()
    dom = dump_dom(call(admin, "POST", "/v1/dashboard/link", tokens["vision"])[1]["url"])
    assert 'data-job="v1"' in dom and not re.search(r"\b(a1|d1)\b", dom)  # the others' names, nowhere
    assert dom.count('class="gpu other"') == 1 and "tenant vision" in dom
    assert 'id="tenants-card" hidden' not in dom and "<td>audio</td>" in dom

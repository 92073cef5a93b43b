"""The HTTP API and its client against a real service: token, bad input, unknown jobs; the service keeps running."""

from __future__ import annotations

import json
import socket
import stat
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_jobs import wait_for, write_spec

from pollux.errors import ServiceError
from pollux.runtime.api import ROUTES, ApiServer, Client, write_endpoint, write_token
from pollux.runtime.local import LocalLauncher
from pollux.runtime.service import Service, ServiceConfig

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them


@pytest.fixture()
def api(tmp_path: Path) -> Iterator[Client]:
    config = ServiceConfig(state_dir=tmp_path / "state", policy="fifo", interval_s=0.5, tick_s=0.05)
    service = Service(config, LocalLauncher(2, stop_grace_s=5.0))
    server = ApiServer(service, write_token(config.state_dir))
    server.start()
    write_endpoint(config.state_dir, server.url)
    loop = threading.Thread(target=service.run, daemon=True)
    loop.start()
    yield Client(config.state_dir)
    service.request_shutdown()
    assert service.wait_stopped(60)
    server.close()
    service.launcher.shutdown()


def raw_request(client: Client, path: str, token: str | None) -> tuple[int, dict]:
    request = urllib.request.Request(client.url + path)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_token_file_is_private_and_every_route_needs_the_token(api):
    mode = stat.S_IMODE((api.state_dir / "token").stat().st_mode)
    assert mode == 0o600
    for token in (None, "wrong"):
        status, body = raw_request(api, "/v1/jobs", token)
        assert status == 401 and "token" in body["error"] and str(api.state_dir) in body["error"]
    assert raw_request(api, "/v1/jobs", api.token)[0] == 200
    assert api.health()["ok"]


def test_oversized_or_malformed_bodies_are_refused_before_they_are_read(api):
    import http.client

    host, port = api.url.removeprefix("http://").split(":")
    for length in ("-1", "abc", str(10**9)):
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        connection.putrequest("POST", "/v1/jobs")
        connection.putheader("Authorization", f"Bearer {api.token}")
        connection.putheader("Content-Length", length)
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 413 and "body must be" in json.loads(response.read())["error"]
        connection.close()
    assert api.health()["ok"]


def test_bad_specs_and_unknown_jobs_get_clear_errors_and_the_service_keeps_running(api, counter_job):
    folder = counter_job.parent
    corrupt = folder / "corrupt.toml"
    corrupt.write_text('name = "x\ncommand = [')
    with pytest.raises(ServiceError, match="not valid TOML"):
        api.submit(corrupt)
    with pytest.raises(ServiceError, match=r"script 'missing\.py' not found"):
        spec = write_spec(folder, "nope")
        spec.write_text(spec.read_text().replace("counter.py", "missing.py"))
        api.submit(spec)
    with pytest.raises(ServiceError, match="field 'gpus'"):
        api.submit(write_spec(folder, "greedy", gpus=100))
    with pytest.raises(ServiceError, match="no job named 'ghost'"):
        api.job("ghost")
    with pytest.raises(ServiceError, match="no job named 'ghost'"):
        api.cancel("ghost")
    with pytest.raises(ServiceError, match="cannot read the spec"):
        api.submit(folder / "absent.toml")
    assert api.jobs() == []  # nothing half-created
    row = api.submit(write_spec(folder, "fine", "--steps 10", gpus=2))
    assert row["name"] == "fine" and row["status"] == "pending"
    with pytest.raises(ServiceError, match="already used"):
        api.submit(write_spec(folder, "fine"))
    wait_for(lambda: api.job("fine")["status"] == "completed", 60, "the good job to complete")
    detail = api.job("fine")
    assert [entry["status"] for entry in detail["history"]] == ["pending", "running", "completed"]
    text, cursor = api.logs("fine")
    assert "[rank 1] done" in text and "[rank 0] done" in text
    assert api.logs("fine", cursor) == ("", cursor)  # nothing new since
    with pytest.raises(ServiceError, match="bad log cursor"):
        api.logs("fine", "0:x")


def test_a_client_without_a_service_says_how_to_start_one(tmp_path):
    with pytest.raises(ServiceError, match="pollux up"):
        Client(tmp_path / "empty")
    (tmp_path / "stale").mkdir()
    write_endpoint(tmp_path / "stale", "http://127.0.0.1:9")
    write_token(tmp_path / "stale")
    with pytest.raises(ServiceError, match="does not answer"):
        Client(tmp_path / "stale", timeout_s=2).jobs()


API_ROUTES = {
    ("GET", "/v1/health"),
    ("GET", "/v1/jobs"),
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs/{name}"),
    ("GET", "/v1/jobs/{name}/logs"),
    ("GET", "/v1/jobs/{name}/metrics"),
    ("POST", "/v1/jobs/{name}/cancel"),
    ("POST", "/v1/jobs/{name}/remove"),
    ("POST", "/v1/shutdown"),
    ("GET", "/v1/tenants"),
    ("GET", "/v1/dashboard"),
    ("GET", "/v1/dashboard/jobs/{name}"),
    ("POST", "/v1/dashboard/link"),
    ("GET", "/v1/openapi.json"),
    ("GET", "/"),
    ("GET", "/ui"),
    ("GET", "/ui/"),
    ("GET", "/ui/login"),
    ("POST", "/ui/login"),
}


def test_the_openapi_description_lists_every_route_with_the_token_and_nothing_without(api):
    for token in (None, "wrong"):
        status, body = raw_request(api, "/v1/openapi.json", token)
        assert status == 401 and "paths" not in body
    status, document = raw_request(api, "/v1/openapi.json", api.token)
    assert status == 200 and document["openapi"].startswith("3.")
    listed = {(method.upper(), path) for path, operations in document["paths"].items() for method in operations}
    assert listed == API_ROUTES
    assert {(m, p.replace("NAME", "{name}")) for m, p in ROUTES} == API_ROUTES - {
        ("GET", "/ui/login"),
        ("POST", "/ui/login"),
    }
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert operation["summary"], (method, path)  # each endpoint's docstring says what it answers
            names = [p["name"] for p in operation["parameters"] if p["in"] == "path"]
            assert names == (["name"] if "{name}" in path else []), (method, path)
    assert document["paths"]["/ui/login"]["post"]["security"] == []  # the one route open without credentials


def test_a_trailing_slash_is_the_same_route_and_a_bad_request_line_gets_one_json_line(api):
    assert raw_request(api, "/v1/jobs/", api.token) == (200, {"jobs": []})
    status, body = raw_request(api, "/v1/no-such-route", api.token)
    assert status == 404 and body["error"] == "no route GET /v1/no-such-route"
    host, port = api.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(b"NOT AN HTTP REQUEST\r\n\r\n")
        reply = connection.makefile("rb").read()
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and "malformed HTTP request" in json.loads(body)["error"]
    assert api.health()["ok"]


def test_a_finished_job_is_removed_with_its_folder_and_its_name_starts_a_new_job(api, counter_job):
    folder = counter_job.parent
    api.submit(write_spec(folder, "again", "--steps 100000 --step-s 0.02"))
    steps = api.state_dir / "jobs" / "again" / "checkpoints" / "step"
    wait_for(steps.exists, 60, "the first job to checkpoint a step")
    with pytest.raises(ServiceError, match=r"job 'again' is running: cancel it first"):
        api.remove("again")
    api.cancel("again")
    wait_for(lambda: api.job("again")["status"] == "cancelled", 60, "the cancel")
    assert api.remove("again") == {"name": "again", "status": "cancelled"}
    assert not (api.state_dir / "jobs" / "again").exists()
    with pytest.raises(ServiceError, match="no job named 'again'"):
        api.remove("again")
    api.submit(write_spec(folder, "again", "--steps 3 --step-s 0.01"))
    wait_for(lambda: api.job("again")["status"] == "completed", 60, "the new job to complete")
    assert [entry["status"] for entry in api.job("again")["history"]] == ["pending", "running", "completed"]
    starts = [line for line in api.logs("again", partial=True)[0].splitlines() if "start world" in line]
    assert starts == ["[rank 0] start world=1 step=0"]  # neither the old job's checkpoint nor its log


def test_a_spec_sent_as_fields_runs_and_its_scripts_metrics_come_back_in_order(api, tmp_path):
    """What `pollux tune` does for each trial: submit the fields of a spec, then poll what the script reported."""
    script = "import pollux.agent as pa\nfor s in range(3):\n    pa.report_metric(accuracy=s / 4, step=s)\n"
    (tmp_path / "report.py").write_text(script)
    fields = {
        "name": "exp-t1",
        "command": ["python", "report.py"],
        "init_batch_size": 8,
        "experiment": "exp",
        "trial": "t1",
    }
    row = api.submit_spec(fields, "exp.toml", tmp_path)
    assert (row["experiment"], row["trial"]) == ("exp", "t1")
    wait_for(lambda: api.job("exp-t1")["status"] == "completed", 60, "the job to complete")
    answer = api.metrics("exp-t1")
    assert [(m["seq"], m["step"], m["metrics"]) for m in answer["metrics"]] == [
        (0, 0, {"accuracy": 0.0}),
        (1, 1, {"accuracy": 0.25}),
        (2, 2, {"accuracy": 0.5}),
    ]
    assert answer["job"]["status"] == "completed" and answer["gpu_seconds"] > 0
    assert [m["seq"] for m in api.metrics("exp-t1", after=1)["metrics"]] == [2]
    with pytest.raises(ServiceError, match="'after' must be an integer"):
        api.request("GET", "/v1/jobs/exp-t1/metrics?after=x")
    with pytest.raises(ServiceError, match=r"exp\.toml: field 'init_batch_size'"):
        api.submit_spec({**fields, "name": "exp-t2", "init_batch_size": 0}, "exp.toml", tmp_path)

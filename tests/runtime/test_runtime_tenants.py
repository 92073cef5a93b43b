"""Tenants in the runtime: `pollux up --tenants FILE`, the spec's `tenant`, the quota layer in the service's rounds,
what survives a restart, and what `pollux ls`, the API and the dashboard show.

The service's logic runs on a launcher without processes (`fake_launcher`) and a clock the test moves, in
milliseconds; the acceptance runs `pollux up` with a real example job on CPU slots (marked e2e).
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_launcher import FakeLauncher
from rich.console import Console
from runtime_jobs import Clock, wait_for, write_spec
from test_cli_local import DIGITS, Up

from pollux.agent.report import read_report
from pollux.cluster import Cluster
from pollux.errors import ServiceError, SpecError, UnknownJobError
from pollux.runtime import views
from pollux.runtime.api import ApiServer, Client, write_endpoint, write_token
from pollux.runtime.listing import job_table, tenant_lines
from pollux.runtime.service import Service, ServiceConfig
from pollux.runtime.spec import json_schema, load_spec, parse_spec
from pollux.runtime.store import StateStore
from pollux.runtime.tokens import token_digest

TWO_TEAMS = """
[[tenant]]
name = "a"
guaranteed = { aws = 2 }

[[tenant]]
name = "b"
guaranteed = { aws = 2 }
"""


def tenants_file(folder: Path, text: str = TWO_TEAMS, name: str = "tenants.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def service_on(state: Path, clock: Clock, tenants: Path | None = None, launcher: FakeLauncher | None = None) -> Service:
    """A pollux service on 4 GPUs of type aws without processes; jobs started or moved keep the default lease."""
    config = ServiceConfig(state_dir=state, policy="pollux", interval_s=60.0, tenants_file=tenants)
    service = Service(config, launcher or FakeLauncher(), clock=clock)
    service.recover()
    return service


def submit(service: Service, folder: Path, name: str, tenant: str, **fields: object) -> None:
    service.submit(load_spec(write_spec(folder, name, "--steps 1000", **{"max_gpus": 4, "tenant": tenant, **fields})))


def held(service: Service) -> dict[str, int]:
    return {job.name: sum(job.allocation) for job in service.store.jobs(include_finished=False)}


@pytest.fixture()
def rig(tmp_path: Path, counter_job: Path) -> Iterator[tuple[Service, FakeLauncher, Clock, Path]]:
    launcher, clock = FakeLauncher(), Clock()
    service = service_on(tmp_path / "state", clock, tenants_file(tmp_path), launcher)
    yield service, launcher, clock, counter_job.parent
    service.store.close()


def test_a_spec_names_its_tenant_as_a_name_and_the_schema_shows_the_field(tmp_path):
    base = {"name": "j", "command": ["python", "-c", "0"], "init_batch_size": 32}
    assert parse_spec(base, "job.toml", tmp_path).tenant == "default"
    assert parse_spec({**base, "tenant": "vision"}, "job.toml", tmp_path).tenant == "vision"
    with pytest.raises(SpecError, match=r"^job\.toml: field 'tenant': expected lowercase letters, digits and '-'"):
        parse_spec({**base, "tenant": "Vision Team"}, "job.toml", tmp_path)
    assert json_schema()["properties"]["tenant"]["default"] == "default"


def test_a_job_of_an_unknown_tenant_is_refused_at_submit_with_the_tenants(rig, tmp_path):
    service, _, clock, folder = rig
    with pytest.raises(SpecError, match=r"^job c1: unknown tenant 'c'; tenants: a, b$"):
        submit(service, folder, "c1", "c")
    with pytest.raises(UnknownJobError):
        service.store.job("c1")
    alone = service_on(tmp_path / "alone", clock)  # no tenants file: one tenant, "default"
    with pytest.raises(SpecError, match=r"unknown tenant 'a'; tenants: default \(this scheduler has no tenants file"):
        submit(alone, folder, "a1", "a")
    submit(alone, folder, "d1", "default")
    assert alone.tenants is None and alone.scheduler.quota is None
    alone.store.close()


def test_borrowed_gpus_go_back_in_the_next_round_by_shrinking_the_elastic_job_despite_its_lease(rig):
    """A's job holds all 4 GPUs (2 borrowed from B); B's job arrives; the round it triggers shrinks A's job to its
    guarantee (its lease ends early: the GPUs are borrowed) and starts B's on the 2 it gets back."""
    service, launcher, clock, folder = rig
    submit(service, folder, "a1", "a")
    service.step()
    assert held(service) == {"a1": 4}
    usage = {t["name"]: t["types"]["aws"] for t in views.tenant_usage(service)["tenants"]}
    assert (usage["a"]["held"], usage["a"]["budget"], usage["a"]["guaranteed"]) == (4, 4, 2)
    clock.now += 5  # well within a1's 60 s lease
    submit(service, folder, "b1", "b")
    service.step()
    assert held(service) == {"a1": 2, "b1": 2}
    assert [sum(r.allocation) for r in launcher.launches] == [4, 2, 2]
    assert service.last_quota is not None and service.last_quota.budgets == {"a": {"aws": 2}, "b": {"aws": 2}}
    usage = {t["name"]: t for t in views.tenant_usage(service)["tenants"]}
    assert [(usage[n]["types"]["aws"]["held"], usage[n]["jobs_running"]) for n in "ab"] == [(2, 1), (2, 1)]
    assert views.job_row(service, service.store.job("b1"), clock.now)["tenant"] == "b"
    history = [reason for _, _, reason in service.store.history("a1")]
    assert any("checkpointed to move to 2 GPU(s)" in reason for reason in history), history


def test_a_restarted_service_keeps_its_tenants_and_a_new_file_replaces_them(rig, tmp_path):
    service, launcher, clock, folder = rig
    submit(service, folder, "b1", "b")
    service.store.close()  # killed: nothing stopped
    restarted = service_on(service.config.state_dir, clock, launcher=launcher)
    assert restarted.tenants == service.tenants and restarted.tenants is not None
    assert restarted.tenants.names == ("a", "b")
    restarted.store.close()

    only_a = tenants_file(tmp_path, '[[tenant]]\nname = "a"\nguaranteed = { aws = 4 }\n', "only-a.toml")
    replaced = service_on(service.config.state_dir, clock, only_a, launcher)
    assert replaced.tenants is not None and replaced.tenants.names == ("a",)
    replaced.step()  # b's job waits, and says why
    assert held(replaced) == {"b1": 0}
    assert replaced.reason("b1") == "tenant b is not in the tenants file (a)"
    replaced.store.close()
    again = service_on(service.config.state_dir, clock, launcher=launcher)
    assert again.tenants == replaced.tenants  # the new file was recorded
    again.store.close()

    with pytest.raises(SpecError, match=r"guaranteed\.aws = 4 is above the cluster's 2 GPUs"):
        service_on(service.config.state_dir, clock, launcher=FakeLauncher(cluster=Cluster(1, 2)))
    bad = tenants_file(tmp_path, '[[tenant]]\nname = "Team A"\n', "bad.toml")
    with pytest.raises(SpecError, match=r"bad\.toml: tenant 'Team A': a runtime tenant's name is lowercase"):
        service_on(service.config.state_dir, clock, bad, launcher)
    last = service_on(service.config.state_dir, clock, launcher=launcher)
    assert last.tenants == replaced.tenants  # a refused file is not recorded
    last.store.close()


def test_pollux_up_refuses_a_tenants_file_in_one_line_before_it_serves(tmp_path):
    """CPU slots are of type cpu: a guarantee of aws GPUs is refused, naming the file, the tenant and the types."""
    state, teams = tmp_path / "state", tenants_file(tmp_path)
    up = [sys.executable, "-m", "pollux", "up", "--slots", "2", "--tenants", str(teams), "--state-dir", str(state)]
    result = subprocess.run(up, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: {teams}: tenant 'a': guaranteed.aws: unknown GPU type; this cluster has cpu"
    ]
    assert not (state / "tenants.json").exists() and not (state / "endpoint.json").exists()


def row(name: str, tenant: str, status: str = "running", gpus: int = 2) -> dict[str, object]:
    return {
        "name": name,
        "tenant": tenant,
        "status": status,
        "gpus": gpus,
        "gpu_type": "aws",
        "placement": [gpus],
        "batch_size": None,
        "epoch": None,
        "goodput": None,
        "restarts": 0,
        "age_s": 5.0,
        "reason": "",
        "last_error": None,
    }


def test_ls_shows_a_tenant_column_only_when_asked_and_one_usage_line_per_tenant():
    def text(rows: list[dict[str, object]], tenant_column: bool) -> str:
        out = io.StringIO()
        Console(width=120, file=out).print(job_table(rows, 120, tenant_column=tenant_column)[0])
        return out.getvalue()

    rows = [row("a1", "vision"), row("b1", "speech", "pending", 0)]
    today = ["job", "status", "GPUs", "type", "placement", "batch", "epoch", "goodput", "restarts", "age"]
    assert text(rows, False).split("\n")[0].split() == today
    with_tenant = text(rows, True).split("\n")
    assert with_tenant[0].split()[:3] == ["job", "tenant", "status"] and with_tenant[1].split()[:2] == ["a1", "vision"]

    quota = {"held": 2, "budget": 2, "guaranteed": 4, "max": None, "entitled": 2.0, "demand": 2.0}
    nothing = {**quota, "held": 0, "budget": 0, "guaranteed": 0}
    usage = {
        "tenants": [
            {"name": "vision", "jobs_running": 1, "jobs_pending": 0, "types": {"a100": quota, "t4": nothing}},
            {"name": "nlp", "jobs_running": 0, "jobs_pending": 0, "types": {"a100": nothing, "t4": nothing}},
        ]
    }
    assert tenant_lines(usage) == [
        "tenant vision: a100 2 held / budget 2 / guaranteed 4; 1 running, 0 pending",
        "tenant nlp:    no GPUs; 0 running, 0 pending",
    ]
    assert tenant_lines({"tenants": []}) == []


def test_the_api_takes_a_submitters_tenant_and_answers_the_tenants_usage(tmp_path, counter_job):
    launcher, clock = FakeLauncher(), Clock()
    service = service_on(tmp_path / "state", clock, tenants_file(tmp_path), launcher)
    server = ApiServer(service, write_token(service.config.state_dir))
    server.start()
    write_endpoint(service.config.state_dir, server.url)
    try:
        client = Client(service.config.state_dir)
        spec = write_spec(counter_job.parent, "j1", "--steps 10", tenant="a")
        assert client.submit(spec, "b")["tenant"] == "b"  # `pollux submit --tenant b` overrides the spec's
        with pytest.raises(ServiceError, match=r"j2: unknown tenant 'zz'; tenants: a, b"):
            client.submit(write_spec(counter_job.parent, "j2", "--steps 10"), "zz")
        service.step()
        usage = client.tenants()
        assert [t["name"] for t in usage["tenants"]] == ["a", "b"] and usage["gpu_types"] == ["aws"]
        assert usage["tenants"][1]["types"]["aws"]["held"] == 4 and usage["round_at"] == clock.now
        assert client.request("GET", "/v1/dashboard")["tenants"] == usage
    finally:
        server.close()
        service.store.close()


TWENTY_TEAMS = "".join(f'[[tenant]]\nname = "t{i:02d}"\nguaranteed = {{ aws = 1 }}\n\n' for i in range(20))


@pytest.mark.e2e  # a real browser
def test_the_dashboard_shows_twenty_tenants_usage_against_their_guarantees(
    tmp_path, counter_job, browser, artifact_dir
):
    """20 tenants on 20 GPUs, a guarantee of 1 each: t00's job borrows what the idle tenants leave, t01's holds its
    own; the page has a row per tenant with the GPUs held, the guarantee and the budget, and t00's bar its borrowed
    part."""
    launcher, clock = FakeLauncher(cluster=Cluster(5, 4)), Clock()
    service = service_on(tmp_path / "state", clock, tenants_file(tmp_path, TWENTY_TEAMS), launcher)
    submit(service, counter_job.parent, "wide", "t00")
    submit(service, counter_job.parent, "one", "t01", max_gpus=1)
    service.step()
    assert held(service) == {"wide": 4, "one": 1}
    token = write_token(service.config.state_dir)
    server = ApiServer(service, token)
    server.start()
    try:
        browser.open(f"{server.url}/ui/login?code={server.sessions.new_code(token_digest(token))}")
        browser.wait_for("document.querySelectorAll('#tenants-body tr').length === 20", what="20 tenant rows")
        row = "document.querySelector('#tenants-body tr[data-tenant=\"{}\"]').textContent"
        assert browser.evaluate(row.format("t00")) == "t001 · 04 / 1 · budget 4"
        assert browser.evaluate(row.format("t01")) == "t011 · 01 / 1 · budget 1"
        assert browser.evaluate(row.format("t19")) == "t190 · 00 / 1 · budget 0"
        borrowed = "document.querySelector('tr[data-tenant=\"{}\"] .borrowed').style.width"
        assert browser.evaluate(borrowed.format("t00")) == "15%" and browser.evaluate(borrowed.format("t01")) == "0%"
        assert browser.evaluate("document.getElementById('tenants-summary').textContent") == "20 tenant(s), 1 borrowing"
        browser.screenshot(artifact_dir / "dashboard-tenants.png")
    finally:
        server.close()
        service.store.close()


# -- the acceptance: real processes ---------------------------------------------------------------------------------
CPU_TEAMS = TWO_TEAMS.replace("aws", "cpu")


@pytest.mark.e2e
def test_a_tenant_gets_its_guarantee_back_within_two_rounds_from_a_real_elastic_job(tmp_path):
    """Tenant A's digits job holds all 4 CPU slots; tenant B (guarantee 2) submits; within two rounds A's job runs on
    2 slots from its checkpoint and B's on the other 2. What makes it deterministic: A's total batch is fixed, so the
    first round may give it all 4 slots (an adaptive job explores 1, then 2, then 4 over several rounds); its lease
    keeps them until B's demand ends it; and its `min_gpus = 2` leaves no size but 2 within its guarantee (whether a
    digits job gains from a second CPU slot depends on the machine's load, and a tenant-unaware pollux behind the
    quota layer would size it anywhere within A's budget)."""
    pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
    pytest.importorskip("sklearn", reason="the examples need it: make test installs it (pip install -e '.[examples]')")
    from runtime_jobs import COUNTER_JOB

    (tmp_path / "counter.py").write_text(COUNTER_JOB)
    a_spec = tmp_path / "digits.toml"
    a_spec.write_text(
        f'name = "digits"\ncommand = ["python", "{DIGITS}", "--epochs", "500"]\ninit_batch_size = 32\n'
        'adaptive = false\nlocal_bsz_bounds = [8, 32]\nmin_gpus = 2\nmax_gpus = 4\ntenant = "a"\n'
    )
    b_spec = write_spec(tmp_path, "counter", "--steps 100000 --step-s 0.05", max_gpus=4)
    state, teams = tmp_path / "state", str(tenants_file(tmp_path, CPU_TEAMS))
    up = Up(state, "--slots", "4", "--interval", "30", "--restart-delay", "1", "--lease", "300", "--tenants", teams)
    store = StateStore(state / "state.db")
    report_path = state / "jobs" / "digits" / "report.json"
    try:
        up.cli("submit", str(a_spec))
        wait_for(lambda: store.job("digits").allocation == (4,), 60, "A's job on all 4 slots")
        # it trains on 4 before it is moved (a report from its 4 replicas with steps done)
        trained = lambda: report_path.exists() and read_report(report_path).progress.steps > 0  # noqa: E731
        wait_for(trained, 90, "A's first steps on 4 replicas")
        assert read_report(report_path).batch.num_replicas == 4
        steps_on_4 = read_report(report_path).progress.steps
        rounds_before = len(store.rounds(1000))
        assert "submitted" in up.cli("submit", "--tenant", "b", str(b_spec)).stdout

        def both_on_two() -> bool:
            return store.job("digits").allocation == (2,) and store.job("counter").allocation == (2,)

        def decided() -> dict[str, tuple[int, int]] | None:
            """Each job's last decision since B's submission: (GPUs it moved to, in which round), once both got 2."""
            rounds = store.rounds(1000)[rounds_before:]
            moved = {d["job"]: (d["gpus_to"], i) for i, r in enumerate(rounds) for d in r.decisions}
            return moved if [moved.get(n, (0,))[0] for n in ("digits", "counter")] == [2, 2] else None

        moved = wait_for(decided, 60, "rounds that give A's job 2 slots and B's 2")
        assert moved == {"digits": (2, moved["digits"][1]), "counter": (2, moved["counter"][1])}
        assert max(i for _, i in moved.values()) <= 1, moved  # within two rounds
        wait_for(both_on_two, 30, "A's job on 2 slots and B's on 2")

        def resumed_on_two() -> bool:
            report = read_report(report_path)
            return report.batch.num_replicas == 2 and report.restarts >= 1 and report.progress.steps > steps_on_4

        wait_for(resumed_on_two, 60, "A's job to train on 2 replicas from its checkpoint")
        listing = up.cli("ls").stdout
        assert listing.split("\n")[0].split()[:3] == ["job", "tenant", "status"], listing
        assert "tenant a: cpu 2 held / budget 2 / guaranteed 2; 1 running, 0 pending" in listing, listing
        assert "tenant b: cpu 2 held / budget 2 / guaranteed 2; 1 running, 0 pending" in listing, listing
    finally:
        store.close()
        up.down()

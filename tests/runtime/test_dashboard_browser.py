"""The live dashboard in a real browser (headless Chromium) against a real `pollux up` on the local backend: the page
names every job and draws its GPUs, a resize appears without a reload, a real example job has its page, and nothing
is shown without the token. Screenshots land in the test-artifact folder (`artifact_dir`)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_jobs import wait_for, write_spec
from test_cli_local import DIGITS, Up

from benchmarks.headless import dump_dom
from pollux.runtime.api import ROUTES
from pollux.runtime.store import StateStore

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

READY = "document.body.dataset.ready === '1'"
JOB_NAMES = ("narrow", "digits", "walker")  # jobs of this module whose names no page's markup or style contains
CELLS = "document.querySelectorAll('#cluster .gpu[data-job=\"{}\"]').length"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    """One Pollux scheduler on 4 CPU slots for the whole module (rounds every second, cheap restarts)."""
    state = tmp_path_factory.mktemp("dashboard") / "state"
    service = Up(state, "--slots", "4", "--interval", "1", "--restart-delay", "1", "--stop-grace", "20")
    yield service
    service.down()


@pytest.fixture(scope="module")
def jobs(up: Up, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the counter job (`runtime_jobs.COUNTER_JOB`)."""
    from runtime_jobs import COUNTER_JOB

    folder = tmp_path_factory.mktemp("jobs")
    (folder / "counter.py").write_text(COUNTER_JOB)
    return folder


def link(up: Up) -> str:
    lines = up.cli("dashboard", "--no-open").stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("http://127.0.0.1:") and "/ui/login?code=" in lines[0], lines
    token = (up.state / "token").read_text().strip()
    assert token not in lines[0]
    return lines[0]


def status_of(up: Up, name: str) -> tuple[str, int]:
    store = StateStore(up.state / "state.db")
    try:
        job = store.job(name)
        return job.status, sum(job.allocation)
    finally:
        store.close()


def test_the_page_names_every_job_draws_its_gpus_and_shows_a_resize_without_reload(up, jobs, browser, artifact_dir):
    spec = dict(local_bsz_bounds=[8, 32], max_gpus=4)
    up.cli("submit", str(write_spec(jobs, "wide", "--steps 100000 --step-s 0.05", **spec)))
    wait_for(lambda: status_of(up, "wide") == ("running", 4), 60, "wide to run on all 4 slots")

    browser.open(link(up))
    browser.wait_for(READY, what="the dashboard's first data")
    browser.wait_for(CELLS.format("wide") + " === 4", what="wide's 4 GPU cells")
    assert browser.evaluate("document.querySelector('#jobs-body tr[data-job=\"wide\"]') !== null")
    browser.evaluate("window.sameDocument = true")

    up.cli("submit", str(write_spec(jobs, "narrow", "--steps 100000 --step-s 0.05", **spec)))
    browser.wait_for(
        f"{CELLS.format('wide')} === 2 && {CELLS.format('narrow')} === 2",
        90,
        "the resize of wide to 2 GPUs in the page",
    )
    assert browser.evaluate("window.sameDocument === true && performance.getEntriesByType('navigation').length === 1")
    decisions = browser.evaluate("document.getElementById('decisions').textContent")
    assert "resize" in decisions and "wide 4 → 2" in decisions
    browser.evaluate("document.querySelector('th[data-key=\"name\"]').click()")  # sorted by name: narrow first
    assert browser.evaluate("document.querySelector('#jobs-body tr').dataset.job") == "narrow"
    browser.screenshot(artifact_dir / "dashboard-overview.png")

    for name in ("wide", "narrow"):
        up.cli("cancel", name)


def test_a_real_example_job_has_its_page_with_goodput_batch_history_and_log(up, tmp_path, browser, artifact_dir):
    pytest.importorskip("torch", reason="the agent needs torch: make test installs it (pip install -e '.[agent]')")
    pytest.importorskip("sklearn", reason="the examples need it: make test installs it (pip install -e '.[examples]')")
    spec = tmp_path / "digits.toml"
    spec.write_text(
        f'name = "digits"\ncommand = ["python", "{DIGITS}", "--epochs", "200"]\ninit_batch_size = 32\n'
        "max_batch_size = 512\nlocal_bsz_bounds = [8, 128]\nmax_gpus = 2\n"
    )
    up.cli("submit", str(spec))
    browser.open(link(up))
    browser.wait_for(READY, what="the dashboard's first data")
    goodput = "document.querySelector('#jobs-body tr[data-job=\"digits\"] td:nth-child(8)')?.textContent"
    browser.wait_for(f"/[0-9]/.test({goodput})", 180, "the digits job's goodput in the table")
    browser.evaluate("document.querySelector('#jobs-body tr[data-job=\"digits\"]').click()")
    browser.wait_for("document.getElementById('job-title').textContent === 'digits'", what="the job page")
    for chart in ("job-goodput", "job-efficiency", "job-batch", "job-gpus"):
        browser.wait_for(f"document.querySelectorAll('#{chart} svg path').length > 0", what=f"the {chart} chart")
    # the agent reports every 2 s: the page adds each new sample to the goodput chart as it comes
    browser.wait_for("document.querySelectorAll('#job-goodput svg circle').length >= 3", 60, "three goodput samples")
    browser.wait_for("document.getElementById('job-log').textContent.includes('[rank 0]')", what="the log tail")
    history = browser.evaluate("document.getElementById('job-history').textContent")
    assert "submitted" in history and "running" in history
    browser.screenshot(artifact_dir / "dashboard-job.png")
    up.cli("cancel", "digits")


def test_the_no_open_link_renders_every_job_in_dump_dom_and_works_once(up):
    url = link(up)
    store = StateStore(up.state / "state.db")
    names = [job.name for job in store.jobs()]
    store.close()
    assert names
    dom = dump_dom(url)
    for name in names:
        assert f'data-job="{name}"' in dom, f"{name} missing from the page's DOM"
    again = dump_dom(url)
    assert 'name="token"' in again and "used already" in again
    assert not any(f'data-job="{name}"' in again for name in names)


def test_a_wrong_or_missing_token_gets_the_login_page_and_no_data(up, browser, artifact_dir):
    base = link(up).split("/ui/")[0]
    browser.open(base + "/ui/")
    browser.wait_for("document.querySelector('input[name=token]') !== null", what="the login form")
    assert browser.evaluate("document.querySelectorAll('[data-job]').length") == 0
    page = "document.documentElement.outerHTML"
    assert not any(name in browser.evaluate(page) for name in JOB_NAMES)
    status = "fetch('/v1/dashboard').then(r => r.status)"
    assert browser.evaluate(status) == 401
    browser.evaluate("document.querySelector('input[name=token]').value = 'not-the-token'")
    browser.evaluate("document.getElementById('login').submit()")
    browser.wait_for("document.getElementById('login-error')?.textContent === 'wrong token'", what="the refusal")
    assert browser.evaluate(status) == 401 and not any(name in browser.evaluate(page) for name in JOB_NAMES)
    browser.screenshot(artifact_dir / "dashboard-login.png")
    token = (up.state / "token").read_text().strip()
    browser.evaluate(f"document.querySelector('input[name=token]').value = {json.dumps(token)}")
    browser.evaluate("document.getElementById('login').submit()")
    browser.wait_for(READY, what="the dashboard after a login with the right token")
    assert token not in browser.evaluate("document.documentElement.outerHTML + location.href")


def request(url: str, method: str, headers: dict[str, str]) -> tuple[int, str]:
    req = urllib.request.Request(url, data=b"{}" if method == "POST" else None, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_no_route_answers_without_the_token(up, jobs):
    up.cli("submit", str(write_spec(jobs, "walker", "--steps 1")))
    url = link(up)
    base = url.split("/ui/")[0]
    port = base.rsplit(":", 1)[1]
    with pytest.raises(urllib.error.HTTPError) as login:  # the 303 to the dashboard, not followed
        urllib.request.build_opener(NoRedirect()).open(url, timeout=10)
    assert login.value.code == 303
    session = login.value.headers["Set-Cookie"].split(";")[0]
    assert session.startswith(f"pollux_session_{port}=")
    forged = f"pollux_session_{port}=forged"
    for method, route in (*ROUTES, ("GET", "/no/such/page"), ("GET", "/v1/no-such-route")):
        path = route.replace("NAME", "walker")
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": forged}):
            code, body = request(base + path, method, headers)
            assert code == 401, (method, path, headers, code)
            assert not any(name in body for name in JOB_NAMES) and "data-job" not in body, (method, path, headers)
        with_session = request(base + path, method, {"Cookie": session})[0]
        if method == "POST":  # a browser session reads; only the token changes anything
            assert with_session == 401, (method, path)
        else:
            assert with_session == (200 if (method, route) in ROUTES else 404), (method, path)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """Keep the login's 303 (and its cookie) instead of following it."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None

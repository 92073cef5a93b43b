"""The live dashboard in a real browser (headless Chromium) against a real `pollux up` on the local backend: the page
names every job and draws its GPUs, a resize appears without a reload, a real example job has its page, and nothing
is shown without the token; with 40 jobs, the running and pending ones come first and the status filter works.
Screenshots land in the test-artifact folder (`artifact_dir`)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_jobs import wait_for, write_spec
from test_cli_local import DIGITS, Up

from benchmarks.dashboard import PlannedJob, record_jobs
from benchmarks.dashboard import link as dashboard_link
from benchmarks.headless import dump_dom
from pollux.runtime.api import ROUTES, ApiServer
from pollux.runtime.client import write_token
from pollux.runtime.local import LocalLauncher
from pollux.runtime.service import Service, ServiceConfig
from pollux.runtime.status import JobStatus
from pollux.runtime.store import StateStore

pytestmark = pytest.mark.e2e  # real processes: run by `make test`; `pytest -m "not e2e"` skips them

READY = "document.body.dataset.ready === '1'"
JOB_NAMES = ("narrow", "digits", "walker")  # jobs of this module whose names no page's markup or style contains
CELLS = "document.querySelectorAll('#cluster .gpu[data-job=\"{}\"]').length"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    """One Pollux scheduler on 4 CPU slots for the whole module (rounds every second, cheap restarts)."""
    state = tmp_path_factory.mktemp("dashboard") / "state"
    service = Up(state, "--slots", "4", "--interval", "1", "--restart-delay", "1", "--lease", "0", "--stop-grace", "20")
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


# 40 jobs on 4 slots in submission order: 4 running and 30 pending among 6 that ended (the last submitted runs)
ENDED = {0: JobStatus.COMPLETED, 9: JobStatus.COMPLETED, 13: JobStatus.FAILED, 18: JobStatus.COMPLETED}
ENDED |= {27: JobStatus.COMPLETED, 31: JobStatus.CANCELLED}
CROWD = [
    PlannedJob(f"crowd-{i:02d}", ENDED.get(i, JobStatus.RUNNING if i in (2, 11, 20, 39) else JobStatus.PENDING))
    for i in range(40)
]
ROWS = "[...document.querySelectorAll('#jobs-body tr')]"
# the first element between a row and the page that scrolls or clips it (null: only the page itself scrolls)
CLIPPED_BY = """(() => {
  for (const row of document.querySelectorAll('#jobs-body tr')) {
    for (let box = row.parentElement; box && box !== document.body; box = box.parentElement) {
      const clips = getComputedStyle(box).overflowY !== 'visible' && box.scrollHeight > box.clientHeight + 1;
      if (clips) return box.id || box.className;
    }
  }
  return null;
})()"""


@pytest.fixture
def crowded(tmp_path: Path) -> Iterator[tuple[str, Service]]:
    """A real service and API on 4 local slots whose store holds `CROWD`, filled as `benchmarks.dashboard` fills its
    own; the scheduling loop does not run, so nothing launches or moves. Yields a one-time dashboard link and the
    service."""
    state = tmp_path / "state"
    launcher = LocalLauncher(4)
    state.mkdir(mode=0o700)
    store = StateStore(state / "state.db")
    record_jobs(store, CROWD, launcher.cluster, time.time() - 3600.0)
    store.close()
    service = Service(ServiceConfig(state_dir=state), launcher)
    server = ApiServer(service, write_token(state))
    server.start()
    try:
        yield dashboard_link(server.url, (state / "token").read_text().strip()), service
    finally:
        server.close()
        launcher.shutdown()
        service.store.close()


def test_forty_jobs_show_running_and_pending_first_unclipped_and_filter_by_status(crowded, browser, artifact_dir):
    url, service = crowded
    browser.open(url)
    browser.wait_for(READY, what="the dashboard's first data")
    meta = browser.evaluate("document.getElementById('meta').textContent")
    assert "local backend" in meta and "Launcher" not in meta, meta

    rows = browser.evaluate(f"{ROWS}.map(tr => [tr.dataset.job, tr.dataset.status])")
    running = [j.name for j in CROWD if j.status is JobStatus.RUNNING]
    pending = [j.name for j in CROWD if j.status is JobStatus.PENDING]
    ended = sorted(ENDED, key=lambda i: -service.store.job(CROWD[i].name).updated_at)
    assert [name for name, _ in rows] == running + pending + [CROWD[i].name for i in ended]  # ended: latest first
    assert browser.evaluate(CLIPPED_BY) is None, "the jobs table must grow with the page, not scroll in a box"
    bottom = browser.evaluate(f"{ROWS}[{len(running + pending) - 1}].getBoundingClientRect().bottom + scrollY")
    assert bottom <= browser.evaluate("document.documentElement.scrollHeight")

    cells = browser.evaluate("[...document.querySelectorAll('#cluster .gpu.held')].map(c => [c.textContent, c.title])")
    assert sorted(label for label, _ in cells) == ["1", "2", "3", "4"]  # a number each, not 3 letters of a name
    legend = browser.evaluate("document.getElementById('cluster-legend').textContent")
    for label, title in cells:
        name = title.split(" ")[0]
        assert name in running and f"{label}{name}" in legend, (label, title, legend)

    browser.screenshot(artifact_dir / "dashboard-forty-jobs.png")

    def shown() -> list[str]:
        return list(browser.evaluate(f"{ROWS}.map(tr => tr.dataset.status)"))

    for status, count in (("pending", 30), ("failed", 1), ("running", 4), ("all", 40)):
        browser.evaluate(f"document.querySelector('#jobs-filter button[data-status=\"{status}\"]').click()")
        assert len(shown()) == count and (status == "all" or set(shown()) == {status}), (status, shown())
    browser.evaluate("document.querySelector('#jobs-filter button[data-status=\"pending\"]').click()")
    time.sleep(2.5)  # two polls redraw the table: the filter stays
    assert shown() == ["pending"] * 30


def test_a_job_page_shows_what_is_known_of_the_job_and_no_dashes(crowded, browser):
    url, _ = crowded
    browser.open(url)
    browser.wait_for(READY, what="the dashboard's first data")
    failed, pending, running = (13, "out of memory"), (3, "0 GPU(s) · 0 restart(s)"), (2, "batch M=96 (m=96, s=0)")
    for i, known in (failed, pending, running):
        name = CROWD[i].name
        browser.evaluate(f"location.hash = 'job/{name}'")
        browser.wait_for(f"document.getElementById('job-title').textContent === '{name}'", what=f"{name}'s page")
        summary = browser.wait_for("document.getElementById('job-summary').textContent", what="the summary")
        assert summary.startswith(str(CROWD[i].status)) and known in summary and "–" not in summary, summary
        assert ("batch" in summary) == (CROWD[i].status is not JobStatus.PENDING), summary

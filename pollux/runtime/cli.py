"""`pollux up | submit | ls | logs | cancel | rm | down | dashboard | tune`: run the scheduler service and talk to it.

The service and its clients meet in a state directory (`--state-dir`, else `$POLLUX_STATE_DIR`, else
`$XDG_STATE_HOME/pollux` = `~/.local/state/pollux`): the SQLite state, the token (0600), the endpoint, per-job logs,
reports and (by default) checkpoints.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TextIO, TypeVar

import typer

from pollux.cli_app import examples
from pollux.cluster import Cluster
from pollux.console import plain_console, print_error
from pollux.defaults import LEASE_MIN_RUN_S, RESTART_DELAY_S, ROUND_INTERVAL_S, STOP_GRACE_S
from pollux.errors import PolluxError, SchedulerDownError, ServiceError
from pollux.option_bounds import bounds

T = TypeVar("T")

StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir", help="Where the service keeps its state (else POLLUX_STATE_DIR, ~/.local/state/pollux)."
    ),
]


class BackendName(StrEnum):
    local = "local"
    ray = "ray"


def state_dir_of(option: Path | None) -> Path:
    """The state directory: the option, the environment, or the XDG default."""
    if option is not None:
        return option.expanduser().resolve()
    if os.environ.get("POLLUX_STATE_DIR"):
        return Path(os.environ["POLLUX_STATE_DIR"]).expanduser().resolve()
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return (base / "pollux").resolve()


@contextlib.contextmanager
def exclusive(state_dir: Path) -> Iterator[None]:
    """Hold the state directory for one service process (released by the kernel even on kill -9)."""
    from pollux.runtime.client import private_dir

    private_dir(state_dir)
    handle: TextIO = (state_dir / "service.lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ServiceError(
            f"a Pollux scheduler already runs on {state_dir}; stop it with `pollux down` or use another --state-dir"
        ) from None
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _listen_on(listen: str, tls: tuple[Path, Path] | None) -> tuple[str, int]:
    """`--listen ADDR:PORT` as (address, port); beyond loopback only with TLS (a token in clear HTTP could be read
    by anyone on the path). A certificate and key that do not make a TLS server are refused here, before anything
    starts."""
    host, _, port = listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ServiceError(f"--listen must be ADDR:PORT with a port in 0-65535 (0: any free one), got {listen!r}")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if tls is None and not loopback:
        raise ServiceError(
            f"--listen {listen} would expose the scheduler beyond this machine in clear HTTP; add --tls-cert FILE "
            "--tls-key FILE to serve HTTPS there, or listen on 127.0.0.1"
        )
    if tls is not None:
        import ssl

        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(*tls)
        except (OSError, ssl.SSLError) as error:
            raise ServiceError(
                f"--tls-cert {tls[0]} --tls-key {tls[1]}: not a certificate and its private key in PEM ({error})"
            ) from None
    return host, int(port)


def _tls_files(cert: Path | None, key: Path | None) -> tuple[Path, Path] | None:
    if (cert is None) != (key is None):
        raise ServiceError("--tls-cert and --tls-key go together: the certificate and its private key (PEM)")
    return None if cert is None or key is None else (cert.resolve(), key.resolve())


def up(
    backend: Annotated[BackendName, typer.Option(help="Where workers run: local processes or a Ray cluster.")] = (
        BackendName.local
    ),
    slots: Annotated[
        int | None,
        typer.Option(help="Local backend: GPU/CPU slots (default: the GPUs, else CPU cores).", callback=bounds(1)),
    ] = None,
    policy: Annotated[
        str, typer.Option(help="Scheduling policy: pollux, fifo, tiresias, tiresias-gittins, optimus.")
    ] = ("pollux"),
    interval: Annotated[
        float, typer.Option(help="Seconds between scheduling rounds.", callback=bounds(0, low_open=True))
    ] = float(ROUND_INTERVAL_S),
    restart_delay: Annotated[
        float, typer.Option(help="Seconds a restart costs a job (Pollux's δ).", callback=bounds(0))
    ] = float(RESTART_DELAY_S),
    stop_grace: Annotated[
        float, typer.Option(help="Seconds a stopping job may take to checkpoint.", callback=bounds(0))
    ] = STOP_GRACE_S,
    max_attempts: Annotated[int, typer.Option(help="Crashed launches before a job fails.", callback=bounds(1))] = 3,
    backoff: Annotated[
        float, typer.Option(help="Seconds before the first retry of a crashed job (doubles).", callback=bounds(0))
    ] = 5.0,
    checkpoint_interval: Annotated[
        float | None,
        typer.Option(
            help="Seconds between jobs' periodic checkpoints (a spec may set its own; default: automatic).",
            callback=bounds(0, low_open=True),
        ),
    ] = None,
    lease: Annotated[
        float,
        typer.Option(
            help="Seconds a job started or moved trains, after its restore, before the policy may move it again.",
            callback=bounds(0),
        ),
    ] = LEASE_MIN_RUN_S,
    listen: Annotated[
        str,
        typer.Option(
            metavar="ADDR:PORT",
            help="Where the API listens (port 0: any free port; clients find it in the state dir). Beyond loopback "
            "only with --tls-cert and --tls-key.",
        ),
    ] = "127.0.0.1:0",
    tls_cert: Annotated[
        Path | None, typer.Option(help="Serve HTTPS with this certificate (PEM; clients trust it from the state dir).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="The private key of --tls-cert (PEM).")] = None,
    ray_address: Annotated[str | None, typer.Option(help="Ray backend: cluster address (e.g. auto).")] = None,
    gpu_resource: Annotated[str, typer.Option(help="Ray backend: the resource that counts as a GPU.")] = "GPU",
    gpu_type: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME[=SLOTS]",
            help="Local backend: the GPU type of the slots (NAME), or one virtual node per NAME=SLOTS (CPU slots, "
            "for tests); default: nvidia-smi's model, else cpu.",
        ),
    ] = None,
    gpu_type_resource: Annotated[
        list[str] | None,
        typer.Option(
            metavar="RESOURCE=TYPE", help="Ray backend: nodes offering RESOURCE have GPUs of TYPE (repeatable)."
        ),
    ] = None,
    autoscale: Annotated[
        bool,
        typer.Option(
            help="Ray backend: size the cluster each round and ask Ray's autoscaler for the nodes (--node-type)."
        ),
    ] = False,
    node_type: Annotated[
        list[str] | None,
        typer.Option(
            metavar="TYPE:GPUS_PER_NODE:MIN:MAX", help="With --autoscale: a node type Ray's autoscaler may start."
        ),
    ] = None,
    autoscale_window: Annotated[
        int | None,
        typer.Option(
            help="With --autoscale: rounds of utility averaged before a type is resized (default: the Pollux "
            "artifact's 15).",
            callback=bounds(1),
        ),
    ] = None,
    tenants: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Tenants TOML: the teams and their GPU quotas per type. Kept in the state dir: a restart without "
            "it keeps them, a new file replaces them.",
        ),
    ] = None,
    state_dir: StateDirOption = None,
) -> None:
    """Run the scheduler service in the foreground. It runs until `pollux down` (or Ctrl-C); its jobs checkpoint on
    the way out and resume at the next `pollux up`."""
    tls = _tls_files(tls_cert, tls_key)
    host, port = _listen_on(listen, tls)  # before the imports: a refusal is said at once
    from pollux.autoscale import WINDOW_ROUNDS
    from pollux.runtime.api import ApiServer
    from pollux.runtime.client import write_endpoint, write_token
    from pollux.runtime.service import Service, ServiceConfig

    if autoscale_window is not None and not autoscale:
        raise ServiceError("--autoscale-window is for --autoscale; add --autoscale or drop --autoscale-window")
    node_types = _node_types(backend, autoscale, node_type or [])  # bad input fails before anything starts
    directory = state_dir_of(state_dir)
    with exclusive(directory):
        _log_to(directory / "scheduler.log")
        config = ServiceConfig(
            state_dir=directory,
            policy=policy,
            interval_s=interval,
            restart_delay_s=restart_delay,
            stop_grace_s=stop_grace,
            max_attempts=max_attempts,
            backoff_s=backoff,
            checkpoint_interval_s=checkpoint_interval,
            lease_s=lease,
            autoscale_window_rounds=autoscale_window or WINDOW_ROUNDS,
            tenants_file=tenants,
        )
        launcher = _launcher(
            backend, slots, ray_address, gpu_resource, stop_grace, gpu_type or [], gpu_type_resource or [], autoscale
        )
        autoscaler = None
        try:
            if node_types:
                from pollux.runtime.autoscale import RayAutoscaler
                from pollux.runtime.gpu_types import parse_type_resources

                mapping = parse_type_resources(gpu_type_resource or [])
                autoscaler = RayAutoscaler(node_types, gpu_resource, mapping)
                autoscaler.check_available()
            service = Service(config, launcher, autoscaler=autoscaler)
            try:
                names = service.tenants.names if service.tenants is not None else None
                api = ApiServer(service, write_token(directory), host, port, tls=tls, tenant_names=names)
            except OSError as error:  # the port is taken, or the address is not this machine's
                raise ServiceError(
                    f"cannot listen on {listen} ({error.strerror}); pick another port in --listen (0: any free one) "
                    "or another address"
                ) from None
        except BaseException:
            launcher.shutdown()
            raise
        api.start()
        cluster = service.capacity()
        scaling = " up to" if autoscaler is not None else ""
        teams = f"; tenants {', '.join(service.tenants.names)}" if service.tenants is not None else ""
        plain_console(stderr=True).print(
            f"Pollux scheduler at {api.url}: policy {policy}, {backend.value} backend,{scaling} {_nodes(cluster)}"
            f"{teams}; state in {directory}",
            soft_wrap=True,
        )
        plain_console(stderr=True).print(
            f"Dashboard at {api.url}/ui/ (log in with the link `pollux dashboard` prints)", soft_wrap=True
        )
        # last: clients that find it can use the service at once
        write_endpoint(directory, api.url, tls[0] if tls else None)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: service.request_shutdown())
        try:
            service.run()
        finally:
            api.close()
            (directory / "endpoint.json").unlink(missing_ok=True)
            if autoscaler is not None:
                with contextlib.suppress(Exception):  # Ray may be gone already: its nodes are gone with it
                    autoscaler.release_all()
            launcher.shutdown()


def _nodes(cluster: Cluster) -> str:
    """The nodes a scheduler runs on, for its first line: `2 node(s) x 2 slot(s)`, or each group where nodes differ
    in size or GPU type."""
    if cluster.uniform and not cluster.heterogeneous:
        return f"{cluster.num_nodes} node(s) x {cluster.gpus_per_node} slot(s)"
    return f"{cluster.num_nodes} node(s): {cluster.describe()} slot(s)"


def _launcher(
    backend: BackendName,
    slots: int | None,
    ray_address: str | None,
    resource: str,
    grace: float,
    gpu_types: list[str],
    type_resources: list[str],
    autoscale: bool = False,
) -> Any:
    from pollux.runtime.gpu_types import parse_slot_types, parse_type_resources

    if backend is BackendName.ray:
        from pollux.runtime.ray_launcher import RayLauncher

        if gpu_types:
            raise ServiceError(
                "--gpu-type is for the local backend; on Ray, nodes say their type (or use --gpu-type-resource)"
            )
        mapping = parse_type_resources(type_resources)
        return RayLauncher(
            ray_address, gpu_resource=resource, stop_grace_s=grace, gpu_type_resources=mapping, allow_empty=autoscale
        )
    from pollux.runtime.local import LocalLauncher

    if type_resources:
        raise ServiceError("--gpu-type-resource is for the Ray backend; locally, use --gpu-type")
    return LocalLauncher(slots, stop_grace_s=grace, gpu_types=parse_slot_types(gpu_types, slots))


def _node_types(backend: BackendName, autoscale: bool, values: list[str]) -> list[Any]:
    """The autoscaler's node types (`pollux.runtime.autoscale`), checked before anything starts; [] without it."""
    if not autoscale:
        if values:
            raise ServiceError("--node-type is for --autoscale; add --autoscale or drop --node-type")
        return []
    if backend is not BackendName.ray:
        raise ServiceError("--autoscale needs the Ray backend (--backend ray): Ray's autoscaler starts the nodes")
    from pollux.runtime.autoscale import parse_node_types

    return parse_node_types(values)


def _log_to(path: Path) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("pollux")
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    root.addHandler(stream)


def _client(state_dir: Path | None) -> Any:
    from pollux.runtime.client import Client

    return Client(state_dir_of(state_dir))


def _spec_files(paths: list[Path]) -> list[Path]:
    """The spec files named: a file as it is, a folder as every `*.toml` in it, sorted (an empty folder as itself,
    refused when submitted)."""
    files: list[Path] = []
    for path in paths:
        found = sorted(path.glob("*.toml")) if path.is_dir() else []
        files.extend(found or [path])
    return files


def submit(
    specs: Annotated[
        list[Path], typer.Argument(help="TOML job specs, or folders of them (every *.toml in one, sorted).")
    ],
    tenant: Annotated[
        str | None, typer.Option(metavar="NAME", help="The tenant the jobs belong to (overrides their specs').")
    ] = None,
    state_dir: StateDirOption = None,
) -> None:
    """Submit jobs, one per spec file.

    A spec's fields: `pollux spec --help`. A bad spec is refused with its file, the field and the fix, and the
    others are still submitted (each on its own: there is no all-or-nothing); the exit code is 2 if any was
    refused."""
    client = _client(state_dir)

    def submit_one(path: Path) -> str:
        try:
            if path.is_dir():
                raise PolluxError("no *.toml spec in this folder")
            row = client.submit(path, tenant)
        except SchedulerDownError:
            raise
        except PolluxError as error:
            message = str(error)  # a spec's own errors name its file already
            raise PolluxError(message if message.startswith(str(path)) else f"{path}: {message}") from None
        return f"submitted {row['name']} ({row['status']})"

    _one_by_one(_spec_files(specs), submit_one)


def _one_by_one(items: Sequence[T], act: Callable[[T], str]) -> None:
    """`act` on every item, each on its own, printing what it says: one refused (a `PolluxError`) is said in one
    line and the others still go; the exit code is then 2. No scheduler at all ends it at once."""
    refused = 0
    for item in items:
        try:
            done = act(item)
        except SchedulerDownError:
            raise
        except PolluxError as error:
            print_error(error)
            refused += 1
            continue
        plain_console().print(done, soft_wrap=True)
    if refused:
        raise typer.Exit(2)


def _listing(directory: Path, job: str | None) -> tuple[Any, dict[str, Any] | None]:
    """The service's answer to `ls` (one job's detail, or every row, with the tenants' use of their quotas); with no
    service, the same read from the state database (no quotas: only a round knows them), and a note on stderr that
    the scheduler is not running."""
    from pollux.runtime.client import Client

    try:
        client = Client(directory)
        return (client.jobs(), client.tenants()) if job is None else (client.job(job), None)
    except SchedulerDownError as error:
        database = directory / "state.db"
        if not database.is_file():
            raise
        from pollux.runtime.snapshot import stored_job, stored_jobs

        plain_console(stderr=True).print(
            f"note: the scheduler is not running ({error}); showing the jobs as stored in {database}", soft_wrap=True
        )
        return (stored_jobs(database, time.time()) if job is None else stored_job(database, job, time.time())), None


def _statuses(option: str) -> set[str]:
    """`--status running,pending` as a set, every name checked."""
    from pollux.runtime.status import JobStatus

    wanted = {part.strip() for part in option.split(",") if part.strip()}
    known = [status.value for status in JobStatus]
    unknown = sorted(wanted - set(known))
    if unknown or not wanted:
        raise PolluxError(f"--status {option!r}: expected statuses among {', '.join(known)}, comma-separated")
    return wanted


PIPE_WIDTH = 200  # `pollux ls` into a pipe or a file: whole rows for grep, still one short line per job


def ls(
    job: Annotated[str | None, typer.Argument(help="Show this job's note and status history instead.")] = None,
    status: Annotated[
        str | None,
        typer.Option(help="Only jobs in these statuses, comma-separated (pending,running,completed,failed,cancelled)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON for scripts: a list of jobs (with NAME: the one job).")
    ] = False,
    state_dir: StateDirOption = None,
) -> None:
    """List jobs, one line each, or one job's history.

    Each line: status, GPUs and placement, batch size, epoch, goodput, restarts, age and a note cut to the line (one
    job's whole note and history with its name). Works while the scheduler is down too: the jobs are then read from
    its database."""
    from pollux.runtime.listing import experiment_lines, grouped, history_table, job_table, tenant_lines

    if status is not None and job is not None:
        raise PolluxError("--status filters the list of jobs; drop it to show one job by name")
    wanted = _statuses(status) if status is not None else None
    answer, usage = _listing(state_dir_of(state_dir), job)
    if wanted is not None:
        answer = [row for row in answer if row["status"] in wanted]
    if as_json:
        print(json.dumps(answer))
        return
    console = plain_console()
    if not console.is_terminal:
        console = plain_console(width=PIPE_WIDTH)
    if job is not None:
        console.print(history_table(answer))
        if answer["reason"]:
            console.print(f"note: {answer['reason']}", soft_wrap=True)
        if answer.get("last_error"):
            console.print(f"last error:\n{answer['last_error']}", soft_wrap=True)
        return
    tenants = {row.get("tenant", "default") for row in answer} | {t["name"] for t in (usage or {}).get("tenants", [])}
    table, width = job_table(grouped(answer), console.width, tenant_column=len(tenants) > 1)
    (console if width <= console.width else plain_console(width=width)).print(table)
    for line in [*experiment_lines(answer), *tenant_lines(usage or {})]:
        console.print(line, soft_wrap=True)


@contextlib.contextmanager
def _job_log(directory: Path, job: str) -> Iterator[tuple[Callable[[], str], Callable[[str, bool], tuple[str, str]]]]:
    """How `logs` reads a job: (its status, its log since a cursor), from the service, or with none running, from
    the state directory (the rank files are there, written by the workers themselves), with a note on stderr."""
    from pollux.runtime.client import Client

    try:
        client = Client(directory)
        client.job(job)
    except SchedulerDownError as error:
        if not (directory / "state.db").is_file():
            raise
        from pollux.runtime.snapshot import StoredLog

        stored = StoredLog(directory, job)
        plain_console(stderr=True).print(
            f"note: the scheduler is not running ({error}); reading the logs in {stored.log_dir}", soft_wrap=True
        )
        try:
            yield stored.status, stored.read
        finally:
            stored.close()
        return
    yield (lambda: str(client.job(job)["status"])), (lambda cursor, partial: client.logs(job, cursor, partial=partial))


def logs(
    job: Annotated[str, typer.Argument(help="Job name.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
    state_dir: StateDirOption = None,
) -> None:
    """Print a job's log, every worker's lines in time order.

    Each line is prefixed with its rank. Works while the scheduler is down too (the workers write their logs into
    the state directory themselves)."""
    from pollux.runtime.status import FINAL

    with _job_log(state_dir_of(state_dir), job) as (job_status, read):
        cursor = ""
        while True:
            finished = job_status() in FINAL
            text, cursor = read(cursor, finished or not follow)
            sys.stdout.write(text)
            sys.stdout.flush()
            if finished or not follow:
                return
            if not text:
                time.sleep(1.0)


def cancel(job: Annotated[str, typer.Argument(help="Job name.")], state_dir: StateDirOption = None) -> None:
    """Stop a job for good (it checkpoints first)."""
    client = _client(state_dir)
    client.cancel(job)
    deadline = time.monotonic() + 600
    while client.job(job)["status"] not in ("completed", "failed", "cancelled") and time.monotonic() < deadline:
        time.sleep(0.5)
    plain_console().print(f"{job}: {client.job(job)['status']}", soft_wrap=True)


def down(
    timeout: Annotated[
        float,
        typer.Option(help="Seconds to wait for the jobs to checkpoint and stop.", callback=bounds(0, low_open=True)),
    ] = 600.0,
    state_dir: StateDirOption = None,
) -> None:
    """Stop the service gracefully. Every running job checkpoints, and resumes at the next `pollux up`."""
    client = _client(state_dir)
    client.shutdown()
    console = plain_console(stderr=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.health()
        except ServiceError:
            console.print("scheduler stopped")
            return
        time.sleep(0.5)
    raise ServiceError(f"the scheduler did not stop within {timeout:.0f} s; its log: {client.state_dir}/scheduler.log")


def rm(
    jobs: Annotated[list[str], typer.Argument(help="Names of finished jobs (completed, failed or cancelled).")],
    state_dir: StateDirOption = None,
) -> None:
    """Remove finished jobs, so that their names can be used again.

    Their state folders (logs, report, default checkpoints) are deleted, their history stays in the state
    database's events. A pending or running job is refused: cancel it first. Works while the scheduler is down too."""
    directory = state_dir_of(state_dir)
    try:
        remove = _client(directory).remove
    except SchedulerDownError:
        if not (directory / "state.db").is_file():
            raise
        with exclusive(directory):  # no service may start meanwhile
            from pollux.runtime.snapshot import remove_stored

            _one_by_one(jobs, lambda name: _removed(remove_stored(directory, name)))
        return
    _one_by_one(jobs, lambda name: _removed(remove(name)))


def tune(
    experiment: Annotated[Path, typer.Argument(help="Experiment TOML: search space, metric, trials, [job].")],
    state_dir: StateDirOption = None,
) -> None:
    """Run a hyper-parameter search of Pollux jobs.

    Ray Tune searches; every trial is a job of the running service, scheduled by goodput like any other.

    The experiment file names the metric the script reports (`pollux.agent.report_metric`), its mode, the number
    of trials and how many run at once, the search (tpe or random), optional ASHA early stopping and the job, whose
    `{NAME}` placeholders take each trial's values (pollux/runtime/experiment.py describes every field). It prints
    each trial's start and end with the best metric so far, then a table of the trials (GPU-hours, JCT) and the
    best configuration. Stopped or killed, the same command resumes it: finished trials are kept, running ones
    re-attach to their jobs."""
    from pollux.runtime.experiment import load_experiment

    spec = load_experiment(experiment)  # a bad experiment is one line before anything starts
    directory = state_dir_of(state_dir)
    from pollux.runtime.tune_guard import DRIVER_ENV, guarded

    if DRIVER_ENV not in os.environ and sys.platform == "linux":  # Ray below a guard that outlives a kill -9 of this
        _client(directory)  # the service must be up: said here, in one line, before a guard or Ray starts
        command = [sys.executable, "-m", "pollux", "tune", str(experiment.resolve()), "--state-dir", str(directory)]
        raise typer.Exit(guarded(command))
    from pollux.runtime.tune import run_experiment

    console = plain_console()
    run_experiment(spec, directory, console if console.is_terminal else plain_console(width=PIPE_WIDTH))


def _removed(answer: dict[str, Any]) -> str:
    return f"removed {answer['name']} ({answer['status']})"


def dashboard(
    no_open: Annotated[bool, typer.Option("--no-open", help="Only print the one-time link; open no browser.")] = False,
    state_dir: StateDirOption = None,
) -> None:
    """Open the live dashboard in a browser. Logged in by a one-time link, printed too (it works once, for 2
    minutes)."""
    link = _client(state_dir).dashboard_link()
    print(link, flush=True)  # one line, exactly the link: scripts and tests read it
    if not no_open:
        import webbrowser

        if not webbrowser.open(link):
            plain_console(stderr=True).print("no browser found here: open the link above in one", soft_wrap=True)


EXAMPLES: dict[Callable[..., None], str] = {
    up: examples(
        "pollux up",
        "pollux up --slots 4 --policy pollux",
        "pollux up --backend ray --ray-address auto",
        "pollux up --tenants tenants.toml",
        "pollux up --listen 0.0.0.0:8443 --tls-cert cert.pem --tls-key key.pem",
    ),
    submit: examples(
        "pollux submit job.toml", "pollux submit a.toml b.toml jobs/", "pollux submit --tenant vision job.toml"
    ),
    ls: examples("pollux ls", "pollux ls digits", "pollux ls --status running,pending", "pollux ls --json"),
    logs: examples("pollux logs digits", "pollux logs digits --follow"),
    cancel: examples("pollux cancel digits"),
    rm: examples("pollux rm digits", "pollux rm digits cifar"),
    down: examples("pollux down"),
    dashboard: examples("pollux dashboard", "pollux dashboard --no-open"),
    tune: examples("pollux tune experiment.toml"),
}


def register(app: typer.Typer) -> None:
    """Add the runtime's commands to the `pollux` application, each with its example."""
    for command, epilog in EXAMPLES.items():
        app.command(command.__name__, epilog=epilog)(command)

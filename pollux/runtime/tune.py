"""`pollux tune EXPERIMENT.toml`: a hyper-parameter search on Ray Tune whose every trial is a Pollux job (§5.4.2).

Ray Tune is the experiment engine (the searcher proposes configurations, ASHA stops the poor trials early, the
experiment checkpoints itself); Pollux stays the resource manager. Each Tune trial is a thin client of the running
Pollux service (`trial_function`): it submits one job (`ExperimentSpec.trial_fields`), then polls the metrics its
script reports (`pollux.agent.report_metric`, stored by the service) and hands each to Tune. Pollux schedules that
job like any other: elastic, batch-adaptive, resized or paused by the policy. For Tune a paused trial is only a slow
one: a trial waits for its job however long the job waits for GPUs. The trial holds no GPU in Ray and one logical
CPU, and Ray is a local instance of this process's own (`address="local"`, as many CPUs as trials run at once),
started and stopped here; it never joins another Ray cluster, even the one a Ray-backed service runs on.

Stopping and resuming:

* A trial Tune stops (ASHA) or that fails is cancelled in Pollux by the driver (`TrialJobs`, a Tune callback: a
  stopped trial's actor is killed, it cannot cancel anything itself).
* The experiment is checkpointed by Tune under `<state dir>/experiments/NAME` (or the spec's `storage_path`), and
  each trial's Tune checkpoint is its position in its job's metrics. `pollux tune` on an experiment that has such a
  folder resumes it (`Tuner.restore`): finished trials stay finished, and an unfinished trial keeps its trial id,
  hence its job's name (`NAME-<trial id>`), so it re-attaches to its job, which ran on in the service meanwhile
  (or finished, or was paused, resuming from its own checkpoints), and goes on from the metric it had reached. A
  trial never submits a second job.
* A metric report whose `step` is not above the last one passed on is skipped: a job resumed from an older
  checkpoint reports those steps again.

At the end it prints one row per trial (its job, configuration, best metric, GPU-hours and JCT from the service),
and the best configuration with its metric: the best value any report of any trial reached.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from pollux.console import plain_console
from pollux.errors import PolluxError, ServiceError, SpecError
from pollux.runtime.client import Client
from pollux.runtime.experiment import Choice, ExperimentSpec, IntRange, LogUniform, Parameter
from pollux.runtime.status import FINAL

if TYPE_CHECKING:
    from ray.tune import Callback, ResultGrid
    from ray.tune.experiment import Trial
else:
    try:
        from ray.tune import Callback
    except ImportError:  # `pollux tune` says what to install; everything else works without Ray Tune
        Callback = object

POLL_S = 0.5  # how often a trial asks the service for its job's new metrics
POSITION_FILE = "position.json"  # a trial's Tune checkpoint: how far into its job's metrics it has read
EXPERIMENT_CHECKPOINT_S = "1"  # Tune's experiment state, saved this often (seconds): a kill -9 loses at most this


def job_name(spec: ExperimentSpec, trial_id: str) -> str:
    return f"{spec.name}-{trial_id}"


def tune_space(space: dict[str, Parameter]) -> dict[str, Any]:
    """The search space in Ray Tune's terms."""
    from ray import tune

    def domain(parameter: Parameter) -> Any:
        if isinstance(parameter, Choice):
            return tune.choice(list(parameter.values))
        if isinstance(parameter, IntRange):
            return tune.randint(parameter.low, parameter.high + 1)  # Tune's upper bound is exclusive
        if isinstance(parameter, LogUniform):
            return tune.loguniform(parameter.low, parameter.high)
        return tune.uniform(parameter.low, parameter.high)

    return {name: domain(parameter) for name, parameter in space.items()}


def _job_exists(client: Client, name: str) -> bool:
    return any(row["name"] == name for row in client.jobs())


def trial_function(spec: ExperimentSpec, state_dir: Path) -> Any:
    """The Tune trainable: one trial as a Pollux job (the module docstring says how)."""

    def run_trial(config: dict[str, Any]) -> None:
        from ray import tune

        client = Client(state_dir)
        trial_id = tune.get_context().get_trial_id()
        name = job_name(spec, trial_id)
        after, last_step = -1, None
        checkpoint = tune.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as folder:
                position = json.loads((Path(folder) / POSITION_FILE).read_text())
            after, last_step = position["after"], position["step"]
        if not _job_exists(client, name):
            client.submit_spec(spec.trial_fields(config, trial_id), f"experiment {spec.name}", spec.workdir)
        passed = checkpoint is not None  # a metric has reached Tune
        while True:
            answer = client.metrics(name, after)
            for entry in answer["metrics"]:
                after, step = entry["seq"], entry["step"]
                if spec.metric not in entry["metrics"] or (
                    step is not None and last_step is not None and step <= last_step
                ):
                    continue
                last_step = step if step is not None else last_step
                with tempfile.TemporaryDirectory() as folder:
                    (Path(folder) / POSITION_FILE).write_text(json.dumps({"after": after, "step": last_step}))
                    result = {**entry["metrics"], "step": step, "pollux_job": name}
                    tune.report(result, checkpoint=tune.Checkpoint.from_directory(folder))
                passed = True
            job = answer["job"]
            if job["status"] == "completed" and passed:
                return
            if job["status"] in FINAL:
                lines = (job.get("last_error") or "").strip().splitlines()
                why = lines[-1] if lines else f"no {spec.metric!r} reported (pa.report_metric({spec.metric}=...))"
                raise PolluxError(f"trial {trial_id}: job {name} ended {job['status']}: {why}")
            time.sleep(POLL_S)

    return run_trial


def _best(values: Sequence[float], mode: str) -> float:
    return max(values) if mode == "max" else min(values)


class TrialJobs(Callback):
    """Tune's callback in this process: says when trials start and end with the best metric so far, and cancels
    the Pollux job of a trial Tune stopped early or that failed. Plain data only (Tune pickles it with the
    experiment): the service's client is made when needed, so its token is never written into the experiment."""

    def __init__(self, spec: ExperimentSpec, state_dir: Path) -> None:
        self.spec, self.state_dir = spec, state_dir

    def _say(self, text: str) -> None:
        plain_console().print(text, soft_wrap=True)

    def _best_so_far(self, trials: list[Trial]) -> str:
        metric, mode = self.spec.metric, self.spec.mode
        seen = [(t.metric_analysis[metric][mode], t) for t in trials if metric in t.metric_analysis]
        if not seen:
            return f"no {metric} yet"
        value, trial = (max if mode == "max" else min)(seen, key=lambda pair: pair[0])
        return f"best {metric} {value:.4g} ({_config_text(trial.config)})"

    def _progress(self, trials: list[Trial], ending: Trial) -> str:
        done = sum(t.status in ("TERMINATED", "ERROR") or t is ending for t in trials)
        return f"[{done}/{self.spec.trials} trials done; {self._best_so_far(trials)}]"

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._say(f"trial {trial.trial_id}: job {job_name(self.spec, trial.trial_id)}, {_config_text(trial.config)}")

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        """A trial ends when its job completed, or when Tune stopped it (ASHA): then its job is still active."""
        reports = trial.last_result.get("training_iteration", 0)
        if self._cancel(trial):
            asha = self.spec.asha
            why = (
                f"reached ASHA's max_t ({reports} reports)"
                if asha is not None and reports >= asha.max_t
                else f"stopped early by Tune after {reports} report(s)"
            )
            self._say(f"trial {trial.trial_id}: {why}, its job cancelled {self._progress(trials, trial)}")
        else:
            self._say(f"trial {trial.trial_id}: finished {self._progress(trials, trial)}")

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._cancel(trial)
        self._say(f"trial {trial.trial_id}: failed (see {trial.error_file}) {self._progress(trials, trial)}")

    def _cancel(self, trial: Trial) -> bool:
        """Cancel the trial's job if it is still active; whether it was."""
        name = job_name(self.spec, trial.trial_id)
        try:
            client = Client(self.state_dir)
            if client.job(name)["status"] in FINAL:
                return False
            client.cancel(name)
        except ServiceError as error:  # never submitted, or the service is gone: nothing runs for it then
            logging.getLogger("pollux.runtime.tune").warning("cancelling job %s: %s", name, error)
            return False
        return True


def _config_text(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in config.items())


def _tuner(spec: ExperimentSpec, state_dir: Path, path: Path) -> Any:
    """A new Tuner for the experiment, or the one checkpointed at `path` (resumed: the search, its trials, ASHA)."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator
    from ray.tune.search.hyperopt import HyperOptSearch

    trainable = tune.with_resources(trial_function(spec, state_dir), {"cpu": 1})
    if tune.Tuner.can_restore(str(path)):
        return tune.Tuner.restore(str(path), trainable, resume_unfinished=True, resume_errored=False)
    if spec.search == "tpe":
        searcher: Any = HyperOptSearch(n_initial_points=spec.initial_points(), random_state_seed=spec.seed)
    else:
        searcher = BasicVariantGenerator(random_state=spec.seed)
    asha = spec.asha
    scheduler = (
        ASHAScheduler(grace_period=asha.grace_period, reduction_factor=asha.reduction_factor, max_t=asha.max_t)
        if asha is not None
        else None
    )
    return tune.Tuner(
        trainable,
        param_space=tune_space(spec.space),
        tune_config=tune.TuneConfig(
            metric=spec.metric,
            mode=spec.mode,
            num_samples=spec.trials,
            max_concurrent_trials=spec.concurrency,
            search_alg=searcher,
            scheduler=scheduler,
        ),
        run_config=tune.RunConfig(
            name=spec.name,
            storage_path=str(path.parent),
            verbose=0,
            callbacks=[TrialJobs(spec, state_dir)],
        ),
    )


def _start_ray(ray: Any, spec: ExperimentSpec, console: Console) -> None:
    """Start this run's private Ray. Ray gives its raylet 30 s to register, fixed, which a busy machine can miss:
    then it tries once more before saying so in one line."""
    for attempt in (1, 2):
        try:
            ray.init(
                address="local",
                num_cpus=spec.concurrency,
                num_gpus=0,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
            return
        except Exception as error:  # Ray raises a bare Exception for it
            if "timed out during startup" not in str(error):
                raise
            ray.shutdown()
            if attempt == 2:
                raise PolluxError(
                    "pollux tune: Ray's local instance did not start within its 30 s, twice (is the machine "
                    "overloaded?); run it again: the experiment resumes where it stopped"
                ) from None
            console.print("Ray's local instance did not start within its 30 s; trying once more")


def run_experiment(spec: ExperimentSpec, state_dir: Path, console: Console) -> None:
    """Run (or resume) the experiment on a local Ray instance of its own, then print its result table."""
    try:
        import ray
    except ImportError:
        raise PolluxError("pollux tune needs Ray Tune and HyperOpt: pip install -e '.[tune]'") from None
    client = Client(state_dir)  # the service must be up before Ray starts
    if spec.tenant is not None:
        tenants = [t["name"] for t in client.tenants()["tenants"]]
        if spec.tenant not in tenants:
            raise SpecError(
                f"experiment {spec.name}: unknown tenant {spec.tenant!r}; the service's tenants: "
                f"{', '.join(tenants) or 'none (it runs without a tenants file: drop the field)'}"
            )
    path = spec.storage(state_dir) / spec.name
    resumed = path.is_dir()
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", EXPERIMENT_CHECKPOINT_S)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # The instance is local and private to this run. With token authentication (Ray 2.60's default for a new local
    # instance) Ray writes ~/.ray/auth_token, and from then on every `ray start` on the machine turns it on too,
    # which the autoscaler's own processes do not follow (a Ray-backed `pollux up --autoscale` then hangs).
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    console.print(
        f"{'resuming' if resumed else 'starting'} experiment {spec.name} (Tune's state in {path})", soft_wrap=True
    )
    _start_ray(ray, spec, console)
    try:
        results = _tuner(spec, state_dir, path).fit()
    finally:
        ray.shutdown()
    console.print(result_table(spec, client, results))
    best = best_trial(spec, client, results)
    if best is None:
        raise PolluxError(f"experiment {spec.name}: no trial reported {spec.metric!r}; see `pollux logs JOB`")
    value, trial_id, config = best
    console.print(
        f"best {spec.metric} {value:.6g}: trial {trial_id} ({job_name(spec, trial_id)}), {_config_text(config)}"
    )


def _configs(results: ResultGrid) -> dict[str, dict[str, Any]]:
    """Each trial's configuration, by trial id (Tune names the id in a trial's results once it reported)."""
    each = (results[i] for i in range(len(results)))
    return {str(r.metrics["trial_id"]): dict(r.config or {}) for r in each if r.metrics and "trial_id" in r.metrics}


def trial_rows(spec: ExperimentSpec, client: Client, results: ResultGrid) -> list[dict[str, Any]]:
    """One row per trial's job, from the service: its status, best metric, GPU-hours and JCT."""
    configs = _configs(results)
    rows = []
    for job in client.jobs():
        if job.get("experiment") != spec.name:
            continue
        answer = client.metrics(job["name"])
        values = [m["metrics"][spec.metric] for m in answer["metrics"] if spec.metric in m["metrics"]]
        finished = job["status"] in FINAL
        rows.append(
            {
                "trial": job["trial"],
                "job": job["name"],
                "status": job["status"],
                "config": configs.get(job["trial"], {}),
                "best": _best(values, spec.mode) if values else None,
                "reports": len(values),
                "gpu_hours": answer["gpu_seconds"] / 3600,
                "jct_s": job["updated_at"] - job["submitted_at"] if finished else None,
            }
        )
    return rows


def best_trial(spec: ExperimentSpec, client: Client, results: ResultGrid) -> tuple[float, str, dict[str, Any]] | None:
    """The best metric any trial reported, its trial id and configuration; None if none reported it."""
    rows = [row for row in trial_rows(spec, client, results) if row["best"] is not None]
    if not rows:
        return None
    row = (max if spec.mode == "max" else min)(rows, key=lambda r: r["best"])
    return row["best"], row["trial"], row["config"]


def result_table(spec: ExperimentSpec, client: Client, results: ResultGrid) -> Table:
    table = Table(title=f"experiment {spec.name}: {spec.metric} ({spec.mode}), one row per trial")
    for column in ("trial", "job", "status", "config", f"best {spec.metric}", "reports", "GPU-hours", "JCT"):
        table.add_column(column, justify="left" if column in ("trial", "job", "status", "config") else "right")
    for row in trial_rows(spec, client, results):
        table.add_row(
            row["trial"],
            row["job"],
            row["status"],
            _config_text(row["config"]) or "-",
            "-" if row["best"] is None else f"{row['best']:.4g}",
            str(row["reports"]),
            f"{row['gpu_hours']:.4f}",
            "-" if row["jct_s"] is None else f"{row['jct_s']:.0f} s",
        )
    return table

"""`pollux tune` starting its private Ray: Ray's fixed 30-s wait for its raylet can run out on a busy machine, so
one more try, then one line. A stand-in for `ray` (its init fails on cue) unit-tests that logic beside the real
Ray of test_tune_e2e.py."""

from __future__ import annotations

import tomllib

import pytest
from rich.console import Console

from pollux.errors import PolluxError
from pollux.runtime.experiment import parse_experiment
from pollux.runtime.tune import _start_ray

TIMED_OUT = "The current node timed out during startup. This could happen because some of the raylet failed"
SPEC = """
name = "hpo"
metric = "accuracy"
mode = "max"
trials = 2
[space]
lr = { type = "loguniform", low = 0.001, high = 0.3 }
[job]
command = ["python", "train.py", "--lr", "{lr}"]
init_batch_size = 32
"""


class Ray:
    """Fails its first `failures` inits with `error`; counts inits and shutdowns."""

    def __init__(self, failures: int, error: str = TIMED_OUT) -> None:
        self.failures, self.error = failures, error
        self.inits = self.shutdowns = 0

    def init(self, **options) -> None:
        self.inits += 1
        assert options["address"] == "local"
        if self.inits <= self.failures:
            raise Exception(self.error)

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.fixture
def spec(tmp_path):
    (tmp_path / "train.py").write_text("")
    return parse_experiment(tomllib.loads(SPEC), "hpo.toml", tmp_path)


def test_a_start_that_timed_out_is_tried_once_more_after_a_shutdown(spec) -> None:
    ray, console = Ray(failures=1), Console(record=True, width=200)
    _start_ray(ray, spec, console)
    assert (ray.inits, ray.shutdowns) == (2, 1)
    assert "trying once more" in console.export_text()


def test_two_timeouts_are_one_line_saying_the_experiment_resumes(spec) -> None:
    ray = Ray(failures=2)
    with pytest.raises(PolluxError, match=r"did not start within its 30 s, twice.*resumes"):
        _start_ray(ray, spec, Console(record=True))
    assert (ray.inits, ray.shutdowns) == (2, 2)


def test_any_other_failure_is_not_retried(spec) -> None:
    ray = Ray(failures=1, error="something else")
    with pytest.raises(Exception, match="something else"):
        _start_ray(ray, spec, Console(record=True))
    assert ray.inits == 1

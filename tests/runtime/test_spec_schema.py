"""`pollux spec schema`: the JSON Schema an editor checks a job.toml with accepts every spec the README shows and the
tests write, and refuses what `load_spec` refuses (an unknown field first of all)."""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from runtime_jobs import write_spec
from test_spec import GOOD

from pollux.errors import SpecError
from pollux.runtime.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits_mlp.py"


@pytest.fixture(scope="module")
def validator() -> Draft202012Validator:
    """The schema as the command prints it, checked as a schema itself."""
    out = subprocess.run(
        [sys.executable, "-m", "pollux", "spec", "schema"], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    schema = json.loads(out)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def readme_specs() -> list[str]:
    """The README's ```toml blocks that are job specs (not an experiment, whose [job] is a template)."""
    blocks = re.findall(r"```toml\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    return [block for block in blocks if "init_batch_size" in block and "[job]" not in block]


def test_the_readme_has_a_spec_to_check():
    assert readme_specs()


@pytest.mark.parametrize("text", readme_specs())
def test_every_readme_spec_is_valid(validator, text):
    data = tomllib.loads(text)
    assert not list(validator.iter_errors(data))
    load_spec_text(text, REPO)


def load_spec_text(text: str, folder: Path) -> None:
    """What `pollux submit` does with a spec file in `folder`."""
    parse_spec(tomllib.loads(text), "job.toml", folder)


def digits(name: str, extra: str = "") -> str:
    """The digits example's spec, as test_cli_local, test_cli_ray, test_autoscale_ray and the dashboard tests
    write it (their extras below)."""
    return (
        f'name = "{name}"\ncommand = ["python", "{DIGITS}", "--epochs", "20"]\ninit_batch_size = 32\n'
        f"max_batch_size = 512\nlocal_bsz_bounds = [8, 128]\n{extra}"
    )


def written_by_the_tests(folder: Path) -> list[str]:
    """The specs the runtime tests submit: runtime_jobs.write_spec with the fields they pass, test_spec's GOOD, and
    the texts test_gpu_types_runtime, test_cli_text and test_node_loss_ray write."""
    (folder / "counter.py").write_text("")
    (folder / "env.py").write_text("")
    counter = [
        {},
        {"gpus": 2},
        {"min_gpus": 8, "max_gpus": 8, "gpus": 8},
        {"local_bsz_bounds": [8, 32], "max_gpus": 4},
        {"max_gpus": 2, "min_gpus": 1, "checkpoint_interval_s": 1.5},
    ]
    texts = [write_spec(folder, f"c{i}", "--steps 10", **fields).read_text() for i, fields in enumerate(counter)]
    typed = 'name = "fast"\ncommand = ["python", "env.py", "fast.json"]\ninit_batch_size = 32\nadaptive = false\n'
    return [
        *texts,
        GOOD,
        typed + "single_gpu_throughput = {a100 = 300.0, rtx = 100.0}\nlocal_bsz_bounds_by_type = {rtx = [8, 16]}\n",
        typed + 'gpu_types = ["rtx"]\n',
        'name = "gloo"\ncommand = "python env.py"\ninit_batch_size = 32\nadaptive = false\n',
        digits("wide", "min_gpus = 3\nmax_gpus = 4\n"),
        digits(
            "fast", "max_gpus = 2\ncheckpoint_interval_s = 2\nsingle_gpu_throughput = {a100 = 300.0, rtx = 100.0}\n"
        ),
        digits("pinned", 'gpu_types = ["rtx"]\n'),
        f'name = "elastic"\ncommand = ["{sys.executable}", "{DIGITS}"]\ninit_batch_size = 12\nadaptive = false\n'
        'max_gpus = 1\ngpu_types = ["a100"]\ncheckpoint_interval_s = 1\n',
    ]


def test_every_spec_the_tests_write_is_valid(validator, tmp_path):
    (tmp_path / "train.py").write_text("")
    for text in written_by_the_tests(tmp_path):
        assert not list(validator.iter_errors(tomllib.loads(text))), text
        load_spec_text(text, tmp_path)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("gpu_count = 4", "gpu_count"),  # unknown fields
        ('owner = "alice"', "owner"),
        ('workdir = "/tmp"', "workdir"),
        ("init_batch_size = 0", "init_batch_size"),
        ('name = "Bad_Name"', "name"),
        ("local_bsz_bounds = [32]", "local_bsz_bounds"),
        ("adaptive = 1", "adaptive"),
        ("checkpoint_interval_s = 0", "checkpoint_interval_s"),
        ("gpu_types = []", "gpu_types"),
        ("single_gpu_throughput = {rtx = -1.0}", "single_gpu_throughput"),
    ],
)
def test_the_schema_refuses_what_load_spec_refuses(validator, tmp_path, line, field):
    base = {"name": "job", "command": ["python", "-c", "pass"], "init_batch_size": 8}
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in base.items() if not line.startswith(f"{k} ")) + line + "\n"
    errors = list(validator.iter_errors(tomllib.loads(text)))
    assert errors, text
    assert any(field in (error.message + " ".join(map(str, error.path))) for error in errors), errors
    with pytest.raises(SpecError, match=f"'{field}"):
        load_spec_text(text, tmp_path)

"""`pollux workload generate` defaults its seed as `pollux simulate` does (0), so neither command requires one."""

from __future__ import annotations

from typer.testing import CliRunner

from pollux.cli import app

runner = CliRunner()


def generate(out, *args: str):
    return runner.invoke(app, ["workload", "generate", "--jobs", "8", "--hours", "2", "--out", str(out), *args])


def test_generate_without_seed_is_the_same_workload_as_seed_0(tmp_path):
    unseeded = generate(tmp_path / "unseeded.csv")
    assert unseeded.exit_code == 0, unseeded.output
    assert generate(tmp_path / "seed0.csv", "--seed", "0").exit_code == 0
    assert generate(tmp_path / "seed1.csv", "--seed", "1").exit_code == 0
    text = (tmp_path / "unseeded.csv").read_text()
    assert text == (tmp_path / "seed0.csv").read_text()
    assert text != (tmp_path / "seed1.csv").read_text()  # the seed matters, so the default is a real choice


def test_both_commands_show_the_same_seed_default_in_their_help():
    for command in (["workload", "generate"], ["simulate"]):
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
        line = next(line for line in result.output.splitlines() if "--seed" in line)
        assert "[default: 0]" in line, result.output

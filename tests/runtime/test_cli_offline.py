"""A client that cannot read the token says so instead of "no scheduler runs"."""

from __future__ import annotations

from test_cli_local import Up


def test_a_missing_token_is_named_with_its_fix(tmp_path):
    state = tmp_path / "state"
    up = Up(state, "--slots", "1")
    try:
        (state / "token").unlink()
        result = up.cli("ls", check=False)
    finally:
        up.process.terminate()
        up.process.wait(60)
        up.log.close()
    assert result.returncode == 2, result.stdout + result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and str(state / "token") in line and "missing" in line, line
    assert "pollux up" in line and "--state-dir" in line, line

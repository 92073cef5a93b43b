"""`pollux tenant add | ls | revoke`: the tokens that reach a team's own jobs and nothing else (`runtime.access`).

They work on the state directory itself, with or without a service running on it (a running one honours a new or
revoked token at its next request): whoever may write the state directory is the admin. Mounted by `pollux/cli.py`
as `pollux tenant ...`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pollux.cli_app import CliApp, examples
from pollux.console import plain_console
from pollux.errors import PolluxError
from pollux.runtime.cli import StateDirOption, state_dir_of

if TYPE_CHECKING:
    from pollux.runtime.tokens import TenantTokens

app = CliApp(
    name="tenant",
    help="Tenants' tokens, each reaching its own tenant's jobs. A tenant's token submits, lists, reads the logs of "
    "and cancels its own tenant's jobs only; the admin token (the state dir's) reaches everything.",
    epilog=examples("pollux tenant add vision", "pollux tenant ls", "pollux tenant revoke vision"),
)


@contextmanager
def _tokens(state_dir: Path | None) -> Iterator[TenantTokens]:
    from pollux.runtime.client import private_dir
    from pollux.runtime.tokens import TenantTokens

    directory = private_dir(state_dir_of(state_dir))
    tokens = TenantTokens(directory / "state.db")
    try:
        yield tokens
    finally:
        tokens.close()


@app.command(epilog=examples("pollux tenant add vision", "TOKEN=$(pollux tenant add vision)"))
def add(
    name: Annotated[str, typer.Argument(help="The tenant (as named in the tenants file and in its jobs' specs).")],
    state_dir: StateDirOption = None,
) -> None:
    """Make a tenant's token and print it, once: only its hash is kept. A tenant that had a token gets a new one,
    and the old one stops working (with the dashboard sessions it opened)."""
    from pollux.runtime.spec import NAME_PATTERN

    if not NAME_PATTERN.match(name):
        raise PolluxError(f"tenant name {name!r}: expected lowercase letters, digits and '-', 1-63 characters")
    with _tokens(state_dir) as tokens:
        token = tokens.issue(name, time.time())
    print(token, flush=True)  # alone on stdout: scripts capture it
    plain_console(stderr=True).print(
        f"tenant {name}: a new token (above; it is not kept, only its hash): give it to the team; they send it as "
        "`POLLUX_TOKEN` or log in to the dashboard with it",
        soft_wrap=True,
    )


@app.command("ls", epilog=examples("pollux tenant ls"))
def list_tenants(state_dir: StateDirOption = None) -> None:
    """List the tenants that hold a token.

    Each with the time its token was made; never the token, which is not kept."""
    with _tokens(state_dir) as tokens:
        enrolled = tokens.enrolled()
    console = plain_console()
    if not enrolled:
        console.print("no tenant holds a token; `pollux tenant add NAME` makes one", soft_wrap=True)
    for entry in enrolled:
        made = datetime.fromtimestamp(entry.created_at).astimezone().isoformat(timespec="seconds")
        console.print(f"{entry.tenant}  token made {made}", soft_wrap=True)


@app.command(epilog=examples("pollux tenant revoke vision"))
def revoke(name: Annotated[str, typer.Argument(help="The tenant.")], state_dir: StateDirOption = None) -> None:
    """Revoke a tenant's token.

    Its requests and dashboard sessions are refused (401) from now on; its jobs run on."""
    with _tokens(state_dir) as tokens:
        if not tokens.revoke(name):
            raise PolluxError(f"tenant {name!r} holds no token; `pollux tenant ls` lists those that do")
    plain_console().print(f"revoked the token of tenant {name}", soft_wrap=True)

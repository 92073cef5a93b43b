"""`pollux data fetch | status`: get the artifact's data and say where it is and whether it is intact.

Mounted by `pollux/cli.py` as `pollux data ...`; also runnable alone as `python -m pollux.data.cli`.
Exit codes: 0 fine; 1 `status` found the data but it does not match the manifest; 2 a `PolluxError` (one line on
stderr, no traceback).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pollux.console import OneLineErrors
from pollux.data.fetch import DEFAULT_BASE_URL, fetch
from pollux.data.locate import default_cache_dir, find_data_dir
from pollux.data.verify import verify

app = typer.Typer(
    name="data",
    help="Get, locate and verify the Pollux artifact's data files.",
    no_args_is_help=True,
    cls=OneLineErrors,
)


@app.command("fetch")
def fetch_command(
    dest: Annotated[Path | None, typer.Option("--dest", help="Folder to fill", show_default="the user cache")] = None,
    base_url: Annotated[
        str, typer.Option("--base-url", help="The origin's simulator/ folder, or a mirror in its layout")
    ] = DEFAULT_BASE_URL,
) -> None:
    """Download every data file, checking each against the manifest's sha256."""
    path = fetch(dest=dest, base_url=base_url)
    report = verify(path)
    typer.echo(f"{path}: {report.summary()}")
    if not report.ok:
        raise typer.Exit(1)


@app.command("status")
def status_command(
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Use this folder instead of searching", show_default=False)
    ] = None,
) -> None:
    """Say where the data was found (and by which rule), and whether every file matches the manifest."""
    location = find_data_dir(data_dir)
    report = verify(location.path)
    typer.echo(f"data:     {location.path}")
    typer.echo(f"found by: {location.source}")
    typer.echo(f"cache:    {default_cache_dir()}")
    typer.echo(f"verified: {'yes' if report.ok else 'NO'} ({report.summary()})")
    if not report.ok:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()

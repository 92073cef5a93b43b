"""`pollux data fetch | status`: get the artifacts' data and say where it is and whether it is intact.

Two artifacts: `pollux-osdi21` (the Pollux OSDI'21 profiles, workloads and results) and `sia-sosp23` (Sia SOSP'23:
the same jobs profiled on six GPU types, and its heterogeneous-cluster workloads). Mounted by `pollux/cli.py` as
`pollux data ...`; also runnable alone as `python -m pollux.data.cli`.
Exit codes: 0 fine; 1 `status` found data that does not match its manifest; 2 a `PolluxError` (one line on stderr,
no traceback), `status` included when neither artifact is anywhere.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from pollux.cli_app import CliApp, examples
from pollux.data.locate import (
    ARTIFACTS,
    DATASET,
    SIA_DATASET,
    Artifact,
    DataLocation,
    check_artifact,
    default_cache_dir,
    find_data_dir,
)
from pollux.errors import DataNotFoundError

app = CliApp(
    name="data",
    help="Get, locate and verify the artifacts' data files. Two artifacts: pollux-osdi21 and sia-sosp23.",
    epilog=examples("pollux data status", "pollux data fetch"),
)


class ArtifactChoice(StrEnum):
    """`--artifact`: one of `ARTIFACTS`, or all of them."""

    POLLUX_OSDI21 = DATASET
    SIA_SOSP23 = SIA_DATASET
    ALL = "all"


@app.command("fetch", epilog=examples("pollux data fetch", "pollux data fetch --artifact sia-sosp23"))
def fetch_command(
    artifact: Annotated[
        ArtifactChoice, typer.Option("--artifact", "-a", help="Which artifact's data to fetch")
    ] = ArtifactChoice.ALL,
    dest: Annotated[
        Path | None, typer.Option("--dest", help="Folder to fill (needs one --artifact)", show_default="the user cache")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url",
            help="The origin's folder (simulator/, sia-simulator/) or a mirror in its layout (needs one --artifact)",
            show_default="the public origin",
        ),
    ] = None,
) -> None:
    """Download every data file. Each is checked against the manifest's sha256."""
    from pollux.data.fetch import fetch  # the HTTP stack: only for this command
    from pollux.data.verify import verify

    chosen = ARTIFACTS if artifact is ArtifactChoice.ALL else (check_artifact(artifact.value),)
    if len(chosen) > 1 and (dest is not None or base_url is not None):
        raise typer.BadParameter("--dest and --base-url name one artifact's folder: add --artifact NAME")
    failed = False
    for name in chosen:
        path = fetch(dest=dest, base_url=base_url, artifact=name)
        report = verify(path, artifact=name)
        typer.echo(f"{name}: {path}: {report.summary()}")
        failed = failed or not report.ok
    if failed:
        raise typer.Exit(1)


@app.command("status", epilog=examples("pollux data status"))
def status_command(
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Use this pollux-osdi21 folder instead of searching", show_default=False),
    ] = None,
    sia_data_dir: Annotated[
        Path | None,
        typer.Option("--sia-data-dir", help="Use this sia-sosp23 folder instead of searching", show_default=False),
    ] = None,
) -> None:
    """Say where each artifact's data is, and whether it is intact. For each artifact: where its data was found (and
    by which rule), and whether every file matches its manifest. An artifact found nowhere is reported as such;
    neither found anywhere is an error."""
    from pollux.data.verify import verify

    given = {DATASET: data_dir, SIA_DATASET: sia_data_dir}
    found: dict[Artifact, DataLocation | DataNotFoundError] = {}
    for artifact in ARTIFACTS:
        try:
            found[artifact] = find_data_dir(given[artifact], artifact)
        except DataNotFoundError as error:
            if given[artifact] is not None:  # a folder the user named must be there
                raise
            found[artifact] = error
    if all(isinstance(where, DataNotFoundError) for where in found.values()):
        raise DataNotFoundError("; ".join(str(error) for error in found.values()))
    failed = False
    for artifact, location in found.items():
        typer.echo(artifact)
        if isinstance(location, DataNotFoundError):
            typer.echo(f"  data:     not found ({location})")
            continue
        report = verify(location.path, artifact=artifact)
        typer.echo(f"  data:     {location.path}")
        typer.echo(f"  found by: {location.source}")
        typer.echo(f"  cache:    {default_cache_dir(artifact)}")
        typer.echo(f"  verified: {'yes' if report.ok else 'NO'} ({report.summary()})")
        failed = failed or not report.ok
    if failed:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()

"""The artifact's published completion times (`anchor-results/`): the yardstick our simulator is checked against."""

from __future__ import annotations

import json
from pathlib import Path

from pollux.data.locate import find_data_dir
from pollux.errors import DataNotFoundError


def anchor_jcts(experiment: str, variant: str, data_dir: Path | None = None) -> dict[str, dict[str, float]]:
    """`{workload: {job: JCT seconds}}` published for `results-<experiment>/<variant>` (e.g. "jobload",
    "tiresias-1.0")."""
    path = find_data_dir(data_dir).path / "anchor-results" / f"results-{experiment}" / variant / "jcts.json"
    if not path.is_file():
        known = sorted(p.name for p in path.parent.parent.glob("*")) if path.parent.parent.is_dir() else []
        raise DataNotFoundError(f"{path}: no published results for {experiment}/{variant}; known: {known}")
    return {w: {job: float(t) for job, t in jobs.items()} for w, jobs in json.loads(path.read_text())["jcts"].items()}


def anchor_average_jct(experiment: str, variant: str, workload: str, data_dir: Path | None = None) -> float | None:
    """Published average JCT in seconds of one workload, or None where the artifact published none."""
    try:
        jobs = anchor_jcts(experiment, variant, data_dir).get(workload)
    except DataNotFoundError:
        return None
    return sum(jobs.values()) / len(jobs) if jobs else None

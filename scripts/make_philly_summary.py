"""Regenerate `pollux/data/philly_summary.json`, the figures the workload generator samples when the data is absent.

Run it once per data version: `python scripts/make_philly_summary.py [--data-dir DIR] [--output FILE]`. It reads the
Philly trace and the artifact's tuned workloads and writes a few dozen numbers (kept jobs by hour of day × GPU-time
bucket, and each application's tuned (GPUs, batch) choices), never the trace itself. The output is deterministic, so
running it on the same files changes nothing; `tests/sim/test_generate.py` checks the committed file against it.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from pollux.data.locate import find_data_dir
from pollux.sim.generate import SUMMARY_PATH, build_summary

_NUMBER_LIST = re.compile(r"\[\s*([-0-9.eE+,\s]+?)\s*\]")


def main() -> None:
    """Derive the summary from the data folder and write it as indented JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="artifact data folder (default: the usual search)")
    parser.add_argument("--output", type=Path, default=SUMMARY_PATH, help=f"where to write (default: {SUMMARY_PATH})")
    args = parser.parse_args()
    location = find_data_dir(args.data_dir)
    summary = build_summary(location.path)
    args.output.write_text(render(summary), encoding="utf-8")
    kept = summary["philly"]["kept_jobs"]
    print(f"wrote {args.output} from {location.path} ({kept} kept Philly jobs)")


def render(summary: dict) -> str:
    """Indented JSON with each list of numbers on one line, so the 24 × 4 table reads as a table in review."""
    text = json.dumps(summary, indent=2)
    return _NUMBER_LIST.sub(lambda match: f"[{', '.join(item.strip() for item in match[1].split(','))}]", text) + "\n"


if __name__ == "__main__":
    main()

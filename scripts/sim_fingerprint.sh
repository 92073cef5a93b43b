#!/usr/bin/env bash
# Fingerprints of the simulations a refactoring must leave unchanged, byte for byte: every default policy on the
# Pollux artifact's workload-1, and pollux, pollux-unaware and gavel on Sia's Philly workload-1 on the
# heterogeneous cluster. Prints the sha256 of each jobs-<policy>.csv and of each summary.json less its wall-clock
# seconds (`wall_s`, the one figure that differs run to run); run it before and after a change, and diff.
# Usage: scripts/sim_fingerprint.sh [OUT_DIR]   (POLLUX=path/to/pollux runs another checkout's)
set -euo pipefail
out=${1:-$(mktemp -d)}
pollux=$(realpath "${POLLUX:-.venv/bin/pollux}")
python=$(dirname "$pollux")/python
"$pollux" simulate workload-1 --out "$out/workload-1" >/dev/null
"$pollux" simulate philly/workload-1 --cluster sia-heterogeneous -p pollux -p pollux-unaware -p gavel \
    --out "$out/philly-workload-1" >/dev/null
cd "$out"
for summary in */summary.json; do
    "$python" -c 'import json, sys
summary = json.load(open(sys.argv[1]))
for metrics in summary.values():
    metrics.pop("wall_s", None)
sys.stdout.write(json.dumps(summary, sort_keys=True))' "$summary" | sha256sum | sed "s|-\$|$summary (less wall_s)|"
done
sha256sum -- */jobs-*.csv

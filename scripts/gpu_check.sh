#!/usr/bin/env bash
# Pollux on a real GPU, in one prepared run of under 8 minutes (issue 31): the agent's examples on CUDA (one
# process), `pollux up` finding the GPU and its type through nvidia-smi and running a job on it to completion, and
# benchmarks/agent_overhead on CUDA; then a summary, one line per check. Without a GPU (no nvidia-smi, or torch sees
# no CUDA device) it says so in one line and exits 0, so CI runs it anywhere.
#
#   scripts/gpu_check.sh                     # python3 from PATH; PYTHON=/path/to/python to choose
#   POLLUX_WHEELS=/path/to/wheels scripts/gpu_check.sh   # missing dependencies installed from there, offline
#
# On a GPU machine it first installs this checkout (`pip install -e . --no-deps`) and whatever of pyproject's
# dependencies is missing from the wheelhouse `${POLLUX_WHEELS:-wheels}` if there is one; a check whose
# dependencies are still missing is reported as SKIP, naming them. Exit status: 1 if any check failed, else 0.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=${POLLUX_WHEELS:-wheels}

smi=$(command -v nvidia-smi || true)
if [ -z "$smi" ] || ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: no GPU here (nvidia-smi $([ -n "$smi" ] && echo found || echo missing), torch sees no CUDA device): nothing to check"
    exit 0
fi

started=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/pollux-gpu-check.XXXXXX")
summary=()
failed=0
record() {  # record STATUS NAME DETAIL
    summary+=("$(printf '%-5s %-28s %s' "$1" "$2" "$3")")
    [ "$1" = FAIL ] && failed=1
    echo "== $1 $2: $3"
}

echo "== GPU: $("$smi" --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
echo "== python: $("$PY" --version 2>&1), torch $("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)')"

# -- install: this checkout, and the missing dependencies from the wheelhouse --------------------------------------
"$PY" -m pip install --quiet --no-deps --no-build-isolation -e . >"$work/install.log" 2>&1 \
    || "$PY" -m pip install --quiet --no-deps -e . >>"$work/install.log" 2>&1 \
    || echo "== pip install -e . failed (see $work/install.log); running from the checkout"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
missing() {  # pyproject's dependencies (and the examples' extra) not installed, or not at their pinned version
    "$PY" - <<'EOF'
import importlib.metadata as md, re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
wanted = project["dependencies"] + project["optional-dependencies"]["examples"]
for requirement in wanted:
    name, _, pin = requirement.partition("==")
    name = re.split(r"[<>=!~ \[;]", name, maxsplit=1)[0]
    try:
        installed = md.version(name)
    except md.PackageNotFoundError:
        installed = None
    # the CLI uses typer's own module layout, so an older typer on the machine breaks it (seen on the H100 image)
    if installed is None or (pin and installed != pin.strip()):
        print(requirement)
EOF
}
need=$(missing)
if [ -n "$need" ] && [ -d "$WHEELS" ]; then
    for requirement in $need; do  # one at a time: a pin with no wheel there must not stop the others
        "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" "$requirement" >>"$work/install.log" 2>&1 \
            || echo "== $requirement: no wheel in $WHEELS installed (see $work/install.log)"
    done
    need=$(missing)
fi
need=$(echo $need)  # one line
[ -n "$need" ] && echo "== missing (no wheel at $WHEELS): $need"
lacks() {  # lacks MODULE...: the ones that do not import
    local m out=""
    for m in "$@"; do "$PY" -c "import $m" 2>/dev/null || out="$out $m"; done
    echo "${out# }"
}
agent_lacks=$(lacks pydantic)

# -- 1, 2: the examples on CUDA, one process, with the agent ---------------------------------------------------------
example() {  # example NAME TIMEOUT SCRIPT ARGS...
    local name=$1 limit=$2 script=$3
    shift 3
    local gone
    gone=$(lacks pydantic $([ "$script" = examples/digits_mlp.py ] && echo sklearn))
    if [ -n "$gone" ]; then
        record SKIP "$name" "needs $gone"
        return
    fi
    local t0=$SECONDS log="$work/$name.log" rc=0
    timeout "$limit" "$PY" "$script" --device cuda --report-path "$work/$name.json" "$@" >"$log" 2>&1 || rc=$?
    if [ "$rc" = 0 ]; then
        record PASS "$name" "$((SECONDS - t0)) s; $(grep '^epoch' "$log" | tail -1)"
    else
        record FAIL "$name" "exit $rc after $((SECONDS - t0)) s; $(tail -3 "$log" | tr '\n' ' ')"
    fi
}
example "digits example (cuda)" 90 examples/digits_mlp.py --epochs 5
example "CNN example (cuda)" 120 examples/cifar_like_cnn.py --epochs 2 --examples 2048

# -- 3: pollux up finds the GPU through nvidia-smi and runs a job on it to completion ----------------------------------
runtime_gone=$(lacks pydantic starlette uvicorn)
if [ -n "$runtime_gone" ]; then
    record SKIP "pollux up + a job on the GPU" "needs $runtime_gone"
else
    t0=$SECONDS
    detected=$("$PY" -c 'from pollux.runtime.local import detect_gpu_devices as d; print(" ".join(f"{i}:{t}" for i, t in d()))')
    state="$work/state"
    cat >"$work/cnn.toml" <<EOF
name = "cnn-gpu"
command = ["python", "$PWD/examples/cifar_like_cnn.py", "--epochs", "2", "--examples", "2048", "--device", "cuda"]
init_batch_size = 64
max_batch_size = 1024
local_bsz_bounds = [16, 128]
max_gpus = 1
EOF
    "$PY" -m pollux up --state-dir "$state" --interval 2 >"$work/up.log" 2>&1 &
    up_pid=$!
    for _ in $(seq 60); do "$PY" -m pollux ls --state-dir "$state" >/dev/null 2>&1 && break; sleep 1; done
    status=unsubmitted
    if "$PY" -m pollux submit --state-dir "$state" "$work/cnn.toml" >>"$work/up.log" 2>&1; then
        for _ in $(seq 120); do
            status=$("$PY" -m pollux ls --state-dir "$state" --json 2>/dev/null \
                | "$PY" -c 'import json, sys; print(next(j["status"] for j in json.load(sys.stdin) if j["name"] == "cnn-gpu"))' 2>/dev/null)
            case $status in completed | failed | cancelled) break ;; esac
            sleep 2
        done
    fi
    listing=$("$PY" -m pollux ls --state-dir "$state" 2>&1 | grep cnn-gpu | tr -s ' ')
    "$PY" -m pollux down --state-dir "$state" >>"$work/up.log" 2>&1 || kill "$up_pid" 2>/dev/null
    wait "$up_pid" 2>/dev/null
    gpu_type=${detected#*:}
    gpu_type=${gpu_type%% *}
    if [ "$status" = completed ] && [ -n "$detected" ] && [ "$gpu_type" != gpu ]; then
        record PASS "pollux up + a job on the GPU" "$((SECONDS - t0)) s; nvidia-smi: $detected; $listing"
    else
        record FAIL "pollux up + a job on the GPU" "job $status, nvidia-smi: ${detected:-none}; $(tail -3 "$work/up.log" | tr '\n' ' ')"
    fi
fi

# -- 4: the agent's per-step overhead on CUDA ----------------------------------------------------------------------------
if [ -n "$agent_lacks" ]; then
    record SKIP "agent overhead (cuda)" "needs $agent_lacks"
else
    t0=$SECONDS
    rc=0
    timeout 150 "$PY" -m benchmarks.agent_overhead --device cuda --world-size 1 --rounds 6 >"$work/bench.log" 2>&1 || rc=$?
    if [ "$rc" = 0 ]; then
        cat "$work/bench.log"
        record PASS "agent overhead (cuda)" "$((SECONDS - t0)) s; table above"
    else
        record FAIL "agent overhead (cuda)" "exit $rc after $((SECONDS - t0)) s; $(tail -3 "$work/bench.log" | tr '\n' ' ')"
    fi
fi

echo
echo "gpu_check summary ($((SECONDS - started)) s; logs in $work):"
printf '  %s\n' "${summary[@]}"
exit "$failed"

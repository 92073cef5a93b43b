# Two commands for a newcomer: `make demo` and `make test`. Both build .venv from nothing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -c 'import sys; sys.exit("Pollux needs Python >= 3.11") if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,agent,examples,bench,ray,tune]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/pollux simulate workload-1 --out results/demo
	@echo "Open results/demo/report.html in a browser: this run's table and charts in one page (works offline)."

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	@scripts/ensure_chromium.sh $(BIN)/python
	$(BIN)/pytest -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks.fit_profiles
	$(BIN)/python -m benchmarks.goodput_speed
	$(BIN)/python -m benchmarks.sim_speed
	$(BIN)/python -m benchmarks.reference
	$(BIN)/python -m benchmarks.sched_latency
	$(BIN)/python -m benchmarks.sched_latency --typed
	$(BIN)/python -m benchmarks.hetero
	$(BIN)/python -m benchmarks.autoscale
	$(BIN)/python -m benchmarks.hpo
	$(BIN)/python -m benchmarks.fit_profiles_typed
	$(BIN)/python -m benchmarks.search_quality
	$(BIN)/python -m benchmarks.agent_overhead
	$(BIN)/python -m benchmarks.runtime_overhead
	$(BIN)/python -m benchmarks.kill_recovery
	$(BIN)/python -m benchmarks.runtime_churn
	$(BIN)/python -m benchmarks.dashboard
	$(BIN)/python -m benchmarks.api_load
	$(BIN)/python -m benchmarks.cli_speed

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

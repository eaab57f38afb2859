# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch (a CUDA build is several GB); override on GPU machines.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.verlprof-installed

.PHONY: install nsys chromium node test unit integration demo bench lint mutation clean

# verl for the bridge's tests: its own requirements pull GPU-side packages, so verl goes in
# without them and tests/requirements/verl.txt adds what its CPU-side modules import.
VERL_SPEC ?= verl==0.9.1

$(STAMP): setup.cfg pyproject.toml tests/requirements/verl.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q '$(TORCH_SPEC)'
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps '$(VERL_SPEC)'
	$(BIN)/pip install -q -r tests/requirements/verl.txt
	touch $@

install: $(STAMP)

nsys:
	bash scripts/install_nsys.sh

# the browser test of timeline.html (tests/integration/test_hostile_names.py)
chromium:
	bash scripts/install_chromium.sh

# the tests that run timeline.html's script under a DOM stub (tests/unit/test_report_*.py)
node:
	bash scripts/install_node.sh

lint: install
	$(BIN)/ruff check verlprof tests benchmarks
	$(BIN)/mypy

unit: install node
	$(BIN)/pytest -q tests/unit

integration: install nsys chromium node
	$(BIN)/pytest -q -m integration

test: install nsys chromium node lint
	$(BIN)/pytest -q

demo: install nsys
	$(BIN)/verlprof demo --config trainer_configs/ppo_trainer.yaml

bench: install nsys
	$(BIN)/python -m benchmarks

# mutation check of the planner, the controller and the report's matrix and straggler rule
# (docs/reliability.md); minutes per module, so not part of `make test`. mutmut goes into the
# venv here only: its own dependencies (pony, parso, junit-xml...) serve no other target.
MUTMUT_SPEC ?= mutmut==2.5.1
mutation: install
	$(BIN)/pip install -q '$(MUTMUT_SPEC)'
	BIN=$(BIN) bash scripts/mutation.sh

clean:
	rm -rf $(VENV) outputs .pytest_cache .ruff_cache .mutmut-cache

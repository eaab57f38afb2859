# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch (a CUDA build is several GB); override on GPU machines.
TORCH_SPEC ?= torch==2.13.0
DEMO_STAMP := $(VENV)/.verlprof-demo-installed
TEST_STAMP := $(VENV)/.verlprof-test-installed

.PHONY: install install-test nsys chromium node test unit integration demo bench lint mutation clean

# verl for the bridge's tests: its own requirements pull GPU-side packages, so verl goes in
# without them and tests/requirements/verl.txt adds what its CPU-side modules import.
VERL_SPEC ?= verl==0.9.1

# What the demo needs and no more (no test tools, no verl and its import requirements):
# `make demo` on a fresh machine stays around a minute.
$(DEMO_STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q '$(TORCH_SPEC)'
	$(BIN)/pip install -q -e .
	touch $@

# The rest, for `make test`: the test extras, verl (--no-deps) and what verl's CPU-side
# modules import.
$(TEST_STAMP): $(DEMO_STAMP) setup.cfg pyproject.toml tests/requirements/verl.txt
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps '$(VERL_SPEC)'
	$(BIN)/pip install -q -r tests/requirements/verl.txt
	touch $@

install: $(DEMO_STAMP)

install-test: $(TEST_STAMP)

nsys:
	bash scripts/install_nsys.sh

# the browser test of timeline.html (tests/integration/test_hostile_names.py)
chromium:
	bash scripts/install_chromium.sh

# the tests that run timeline.html's script under a DOM stub (tests/unit/test_report_*.py)
node:
	bash scripts/install_node.sh

lint: install-test
	$(BIN)/ruff check verlprof tests benchmarks scripts
	$(BIN)/mypy

unit: install-test node
	$(BIN)/pytest -q tests/unit

integration: install-test nsys chromium node
	$(BIN)/pytest -q -m integration

test: install-test nsys chromium node lint
	$(BIN)/pytest -q -n 2 --dist loadfile --no-loadscope-reorder --max-worker-restart=0

demo: install nsys
	$(BIN)/verlprof demo --config trainer_configs/ppo_trainer.yaml

bench: install-test nsys
	$(BIN)/python -m benchmarks

# mutation check of the planner, the controller and the report's matrix and straggler rule
# (docs/reliability.md); minutes per module, so not part of `make test`. mutmut goes into the
# venv here only: its own dependencies (pony, parso, junit-xml...) serve no other target.
MUTMUT_SPEC ?= mutmut==2.5.1
mutation: install-test
	$(BIN)/pip install -q '$(MUTMUT_SPEC)'
	BIN=$(BIN) bash scripts/mutation.sh

clean:
	rm -rf $(VENV) outputs .pytest_cache .ruff_cache .mutmut-cache

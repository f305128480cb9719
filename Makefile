# Two entry points: `make demo` and `make test`. Both work on a fresh Debian machine as root.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STATE := .sandbox

.PHONY: demo test venv lint bench docs sandbox-slurm sandbox-airflow sandbox-ui sandbox-down clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

sandbox-slurm:
	SANDBOX_SLURM_TAKEOVER=1 bash sandbox/slurm/up.sh
	SANDBOX_SLURM_TAKEOVER=1 bash sandbox/slurm/versions.sh up all

# PostgreSQL from Debian's packages for the real Airflow deployment (tests/deployment).
sandbox-airflow:
	bash sandbox/airflow/install.sh

# Headless Chromium from Debian's packages for the browser tests of the Airflow UI (tests/ui).
sandbox-ui:
	bash sandbox/ui/install.sh

# The documentation site (docs/): warnings are errors.
docs: venv
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html

demo: venv
	$(PY) -m sandbox.demo

test: venv sandbox-slurm sandbox-airflow sandbox-ui docs
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -p no:cacheprovider tests

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: venv
	@for script in bench/bench_*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

sandbox-down:
	-bash sandbox/slurm/down.sh
	-$(PY) -m sandbox.kube stop --state-dir $(STATE)/kube 2>/dev/null
	-$(PY) -m sandbox.gcs stop --state-dir $(STATE)/gcs 2>/dev/null

clean: sandbox-down
	rm -rf $(VENV) $(STATE)

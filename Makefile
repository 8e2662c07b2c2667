# torchx-airflow: `make demo` runs the example pipeline, `make test` runs the whole suite.
# Both set themselves up: a virtual environment in .venv and an Airflow home in .airflow (git-ignored).

PYTHON ?= python3
VENV ?= $(CURDIR)/.venv
BIN := $(VENV)/bin
export AIRFLOW_HOME ?= $(CURDIR)/.airflow
export AIRFLOW__CORE__DAGS_FOLDER ?= $(CURDIR)/dags
export AIRFLOW__CORE__LOAD_EXAMPLES ?= False
# local_cwd jobs run `python` from PATH: make it the environment's interpreter.
export PATH := $(BIN):$(PATH)

# `make up` ports: make up AIRFLOW_PORT=8081 MLFLOW_PORT=5001
AIRFLOW_PORT ?= 8080
MLFLOW_PORT ?= 5000
STACK_ENV = AIRFLOW_PORT=$(AIRFLOW_PORT) MLFLOW_PORT=$(MLFLOW_PORT) AIRFLOW_LOG_PORT=$(or $(AIRFLOW_LOG_PORT),8793)

.PHONY: install demo test lint clean up down slurm-up slurm-down bench

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml tracker/pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10+ is needed, found " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e './tracker[mlflow,s3]' -e '.[test]'
	touch $@

demo: install
	bash scripts/airflow-home.sh
	bash scripts/demo.sh

test: install
	bash scripts/airflow-home.sh
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Every bench/bench_*.py, each figure against its baseline in the same run: writes docs/benchmarks.md.
# BENCH_ARGS=tracker runs only bench/bench_tracker.py.
bench: install
	$(BIN)/python bench/run.py $(BENCH_ARGS)

up: install
	$(STACK_ENV) bash scripts/airflow-stack.sh up

down:
	$(STACK_ENV) bash scripts/airflow-stack.sh down

slurm-up:
	bash scripts/slurm/cluster.sh up

slurm-down:
	bash scripts/slurm/cluster.sh down

lint: install
	$(BIN)/python -m pip install --quiet ruff
	$(BIN)/ruff check torchx_airflow tracker dags tests

clean:
	rm -rf $(VENV) $(AIRFLOW_HOME)

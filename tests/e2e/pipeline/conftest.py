"""One stack of `make up` (tests/e2e/conftest.py) for the files of this package: they run on one
test worker, one after the other (tests/scheduling.py), and the stack stops after the last of them."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import MLFLOW_PASSWORD, dags_stack


@pytest.fixture(scope="package")
def pipeline_stack(slurm_cluster, tmp_path_factory):
    with dags_stack(tmp_path_factory.mktemp("e2e-airflow"), MLFLOW_PASSWORD).running() as stack:
        yield stack

"""The tracker contract on every store: fsspec on memory://, a local directory and s3:// (moto's
S3 server), and MLflow on a real tracking server and on sqlite:///."""

from __future__ import annotations

import uuid

import pytest
from torchx_airflow_tracker.fsspec_store import FsspecStore
from torchx_airflow_tracker.mlflow_store import MlflowStore

from tests.tracker.contract import CacheRecordsContract, TrackerContract


class TestMemoryStore(TrackerContract, CacheRecordsContract):
    @pytest.fixture
    def store(self):
        return FsspecStore(f"memory://tracker-{uuid.uuid4().hex}")


class TestLocalDirStore(TrackerContract, CacheRecordsContract):
    @pytest.fixture
    def store(self, tmp_path):
        return FsspecStore(str(tmp_path / "not" / "yet" / "there"))  # the root is created


class TestFileUrlStore(TrackerContract, CacheRecordsContract):
    @pytest.fixture
    def store(self, tmp_path):
        return FsspecStore(f"file://{tmp_path}/store")


class TestS3Store(TrackerContract, CacheRecordsContract):
    @pytest.fixture
    def store(self, s3_endpoint):
        options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
        return FsspecStore(f"s3://tracker-{uuid.uuid4().hex[:12]}/runs", options)


class TestMlflowServerStore(TrackerContract, CacheRecordsContract):
    @pytest.fixture
    def store(self, mlflow_uri):
        return MlflowStore(mlflow_uri, experiment=f"contract-{uuid.uuid4().hex[:8]}")


class TestMlflowSqliteStore(TrackerContract, CacheRecordsContract):
    @pytest.fixture
    def store(self, tmp_path):
        return MlflowStore(f"sqlite:///{tmp_path}/mlflow.db", experiment="contract")

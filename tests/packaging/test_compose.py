"""docker-compose.yml and the Dockerfile, validated without a Docker engine: the file parses, every
service the connections point at exists on the right port, env and ports agree, the CeleryExecutor
has its broker, result backend and scalable workers, and every file the stack builds from or mounts
exists."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
AIRFLOW_SERVICES = (
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    return dict(env) if isinstance(env, dict) else dict(e.split("=", 1) for e in env)


def _command_port(service: dict) -> int:
    command = service["command"] if isinstance(service["command"], str) else " ".join(service["command"])
    return int(re.search(r"--port\s+(\d+)", command).group(1))


def _published(service: dict) -> set[int]:
    return {int(str(p).split(":")[-1]) for p in service.get("ports", [])}


def test_every_airflow_service_is_there_and_healthchecked(compose):
    services = compose["services"]
    for name in (*AIRFLOW_SERVICES, "postgres", "redis", "mlflow", "minio"):
        assert name in services, name
        assert "healthcheck" in services[name], f"{name} has no health check"
    commands = {services[n]["command"] for n in AIRFLOW_SERVICES}
    assert commands == {"api-server", "scheduler", "dag-processor", "triggerer", "celery worker"}
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown service {dependency}"


def test_connections_point_at_services_that_exist(compose):
    services = compose["services"]
    env = _env(services["airflow-scheduler"])
    conns = {
        k.removeprefix("AIRFLOW_CONN_").lower(): json.loads(v)
        for k, v in env.items()
        if k.startswith("AIRFLOW_CONN_")
    }
    torchx = conns["torchx_default"]
    assert torchx["conn_type"] == "torchx"
    for tracker in torchx["extra"]["trackers"]:
        assert tracker in conns, f"tracker connection {tracker} is not defined"
    mlflow = urlparse(conns["mlflow_default"]["host"])
    assert mlflow.hostname in services and _command_port(services[mlflow.hostname]) == mlflow.port
    fs = conns["torchx_fsspec_default"]
    endpoint = urlparse(fs["extra"]["storage_options"]["endpoint_url"])
    assert endpoint.hostname in services and endpoint.port in _published(services[endpoint.hostname])
    minio_env = _env(services["minio"])
    assert (fs["login"], fs["password"]) == (minio_env["MINIO_ROOT_USER"], minio_env["MINIO_ROOT_PASSWORD"])
    bucket = urlparse(fs["extra"]["root"]).hostname
    assert bucket in services["minio-buckets"]["entrypoint"]


def test_airflow_env_agrees_with_postgres_and_the_api_server(compose):
    services = compose["services"]
    pg = _env(services["postgres"])
    for name in AIRFLOW_SERVICES:
        env = _env(services[name])
        db = urlparse(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
        assert (db.hostname, db.username, db.password, db.path) == (
            "postgres", pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], f"/{pg['POSTGRES_DB']}"
        )  # fmt: skip
        api = urlparse(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
        assert api.hostname == "airflow-apiserver" and api.port in _published(services["airflow-apiserver"])
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"], "services must share one JWT secret"
    mlflow_db = re.search(r"--backend-store-uri\s+(\S+)", services["mlflow"]["command"]).group(1)
    created = (REPO / "deploy" / "postgres-init.sql").read_text()
    assert f"CREATE DATABASE {urlparse(mlflow_db).path.lstrip('/')}" in created


def test_the_celery_executor_has_its_broker_and_result_backend(compose):
    services = compose["services"]
    pg = _env(services["postgres"])
    redis = services["redis"]
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    for name in AIRFLOW_SERVICES:
        env = _env(services[name])
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        broker = urlparse(env["AIRFLOW__CELERY__BROKER_URL"])
        assert (broker.scheme, broker.hostname) == ("redis", "redis"), name
        assert broker.port in {int(p) for p in redis["expose"]}, name
        # results in a database, as Airflow recommends: the metadata DB's Postgres
        backend = env["AIRFLOW__CELERY__RESULT_BACKEND"]
        assert backend == "db+" + env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace("+psycopg2", ""), name
        assert urlparse(backend).password == pg["POSTGRES_PASSWORD"], name
        assert int(env["AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT"]) >= 86400
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy", name


def test_the_workers_scale_with_one_shared_log_folder(compose):
    services = compose["services"]
    worker = services["airflow-worker"]
    # `docker compose up --scale airflow-worker=3` needs a service without a fixed name, host or port
    assert not {"container_name", "hostname", "ports"} & set(worker), worker
    assert worker["deploy"]["replicas"] >= 2
    assert _env(worker)["DUMB_INIT_SETSID"] == "0"  # SIGTERM reaches Celery: warm shutdown
    # each replica answers for its own Celery node, named after its container
    assert 'inspect ping -d "celery@$${HOSTNAME}"' in worker["healthcheck"]["test"][1]
    assert worker["depends_on"]["airflow-apiserver"]["condition"] == "service_healthy"
    for name in (*AIRFLOW_SERVICES, "flower"):
        assert "airflow-logs:/opt/airflow/logs" in services[name]["volumes"], name
    assert "airflow-logs" in compose["volumes"]
    flower = services["flower"]
    assert flower["command"] == "celery flower" and flower["profiles"] == ["flower"]
    assert 5555 in _published(flower)
    dockerfile = (REPO / "Dockerfile").read_text()
    assert '"/opt/torchx-airflow[${EXTRAS},${TORCHX_EXTRA}]"' in dockerfile
    assert "ARG TORCHX_EXTRA=torchx-nightly" in dockerfile  # TorchX that installs beside urllib3 2
    assert "ARG EXTRAS=celery,examples" in dockerfile  # the Celery provider, and torch for the pipeline
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^celery = \[\s*"apache-airflow-providers-celery', pyproject, re.M)


def test_every_file_the_stack_builds_from_or_mounts_exists(compose):
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (REPO / source).exists(), f"{name} mounts missing {source}"
    dockerfile = (REPO / "Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY"):
            sources = [a for a in shlex.split(line)[1:-1] if not a.startswith("--")]
            for source in sources:
                assert (REPO / source).exists(), f"Dockerfile copies missing {source}"
    base = re.search(r"^FROM apache/airflow:(\d+)\.(\d+)\.\d+", dockerfile, re.M)
    assert base and (int(base.group(1)), int(base.group(2))) >= (3, 3)
    assert compose["services"]["airflow-scheduler"]["build"] == "."
    assert json.loads((REPO / "deploy" / "passwords.json").read_text())["admin"]


def test_the_example_dags_use_only_connections_the_stack_defines(compose):
    env = _env(compose["services"]["airflow-scheduler"])
    defined = {k.removeprefix("AIRFLOW_CONN_").lower() for k in env if k.startswith("AIRFLOW_CONN_")}
    used = {"torchx_default"}
    for dag in (REPO / "dags").glob("*.py"):
        used |= set(re.findall(r"(?:torchx_conn_id|tracker_conn_ids)=\[?\"([a-z0-9_]+)\"", dag.read_text()))
    assert used <= defined, used - defined

# Airflow from the index at the Dockerfile's version with every dependency of this checkout's
# distributions, installed as the Dockerfile does (torch first, by scripts/install-torch.sh); the
# distributions themselves are replaced by airflow.sh. The official image's tools the compose file
# uses: curl (health checks) and dumb-init (its entrypoint).
set -euo pipefail
. /build/apt.sh
apt_install python3 python3-venv curl dumb-init procps
python3 -m venv /opt/venv
/opt/venv/bin/pip install --quiet --upgrade pip
cp -r /src/pyproject.toml /src/README.md /src/torchx_airflow /src/tracker /tmp/
mkdir -p /tmp/scripts && cp /src/scripts/install-torch.sh /tmp/scripts/
TORCH_INDEX_TIMEOUT=3 bash /tmp/scripts/install-torch.sh /opt/venv/bin/python "torch==2.13.0"
/opt/venv/bin/pip install --quiet "apache-airflow[postgres]==$AIRFLOW_VERSION" \
  "/tmp/tracker[mlflow,s3,torchx-nightly]" "/tmp[celery,examples,torchx-nightly]"
rm -rf /tmp/* /root/.cache

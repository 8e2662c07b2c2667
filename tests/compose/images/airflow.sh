# This checkout's two distributions over airflow-deps (fast: no dependency changes), and the
# entrypoint: `airflow <command>` as the official image's entrypoint runs it.
set -euo pipefail
cp -r /src/pyproject.toml /src/README.md /src/torchx_airflow /src/tracker /tmp/
/opt/venv/bin/pip install --quiet --no-deps --force-reinstall /tmp/tracker /tmp
install -m 755 /build/airflow-entrypoint.sh /usr/local/bin/airflow-entrypoint
mkdir -p /opt/airflow/dags /opt/airflow/logs /opt/airflow/data
rm -rf /tmp/* /root/.cache

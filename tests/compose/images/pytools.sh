# MLflow at the version of docker-compose.yml's mlflow image, with what its command installs
# (psycopg2-binary, boto3), and moto's S3 server standing in for MinIO: one venv on PATH.
set -euo pipefail
. /build/apt.sh
apt_install python3 python3-venv curl
python3 -m venv /opt/venv
/opt/venv/bin/pip install --quiet "mlflow==$MLFLOW_VERSION" psycopg2-binary boto3 "moto[server]>=5"

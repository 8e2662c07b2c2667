# MLflow at the version of docker-compose.yml's mlflow image, with what its command installs
# (psycopg2-binary, boto3), and moto's S3 server standing in for MinIO: one venv on PATH.
set -euo pipefail
. /build/apt.sh
apt_install python3 python3-venv curl
python3 -m venv /opt/venv
# SQLAlchemy as of that MLflow release: 2.1 dropped the pool class MLflow 3.1's server imports
/opt/venv/bin/pip install --quiet "mlflow==$MLFLOW_VERSION" "sqlalchemy<2.1" psycopg2-binary boto3 "moto[server]>=5"

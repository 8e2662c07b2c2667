# Airflow 3.3 with the TorchX provider (and its `celery` extra: the CeleryExecutor) and the job-side
# tracker stores, for docker-compose.yml.
#   docker build -t torchx-airflow .
# Training images need only the tracker: pip install 'torchx-airflow-tracker[mlflow,s3]'.
FROM apache/airflow:3.3.2-python3.11

USER root
# slurm-client lets the workers and the triggerer talk to a Slurm cluster (sbatch, sacct, scontrol);
# munge authenticates them to it (mount the cluster's /etc/munge/munge.key and /etc/slurm).
RUN apt-get update \
 && apt-get install -y --no-install-recommends slurm-client munge \
 && rm -rf /var/lib/apt/lists/*
USER airflow

COPY --chown=airflow:root tracker /opt/torchx-airflow/tracker
COPY --chown=airflow:root pyproject.toml README.md /opt/torchx-airflow/
COPY --chown=airflow:root torchx_airflow /opt/torchx-airflow/torchx_airflow
# The `examples` extra brings torch for the example pipeline's local_cwd runs (its DDP training);
# a deployment whose jobs run elsewhere can drop it: `--build-arg EXTRAS=celery`.
ARG EXTRAS=celery,examples
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" \
      "/opt/torchx-airflow/tracker[mlflow,s3]" "/opt/torchx-airflow[${EXTRAS}]"

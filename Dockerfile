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
COPY --chown=airflow:root scripts/install-torch.sh /opt/torchx-airflow/scripts/
# The `examples` extra brings torch for the example pipeline's local_cwd runs (its DDP training);
# a deployment whose jobs run elsewhere can drop it: `--build-arg EXTRAS=celery`. torch comes from
# PyTorch's CPU index when the build reaches it (else the configured index: on Linux the CUDA build,
# several GB); `--build-arg TORCH_INDEX=` skips that index.
# TorchX comes from torchx-nightly, which installs beside Airflow's urllib3 2.x (the 0.7 release pins
# urllib3<1.27): `--build-arg TORCHX_EXTRA=torchx` for the release.
ARG EXTRAS=celery,examples
ARG TORCH=torch==2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG TORCHX_EXTRA=torchx-nightly
ENV PIP_NO_CACHE_DIR=1
RUN case ",${EXTRAS}," in *,examples,*) bash /opt/torchx-airflow/scripts/install-torch.sh python "${TORCH}";; esac \
 && pip install "apache-airflow==${AIRFLOW_VERSION}" \
      "/opt/torchx-airflow/tracker[mlflow,s3,${TORCHX_EXTRA}]" "/opt/torchx-airflow[${EXTRAS},${TORCHX_EXTRA}]"

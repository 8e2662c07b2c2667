#!/usr/bin/env bash
# As the official image's entrypoint: the command is an Airflow command (`db migrate`, `scheduler`,
# `celery worker`...), or bash/python to run as it is.
set -euo pipefail
case "${1:-}" in
  bash | python | python3 | airflow) exec "$@" ;;
esac
exec airflow "$@"

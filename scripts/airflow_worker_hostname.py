"""The hostname a Celery worker of ``scripts/airflow-stack.sh`` records on the task instances it runs.

Airflow records ``[core] hostname_callable()`` on every task instance (and checks it on every
heartbeat). Two workers on one machine would both record the machine's name, so a task instance
could not tell which worker ran it. The stack starts each worker with ``AIRFLOW_WORKER_HOSTNAME``
set to its Celery node name (``worker-1@host``) and this module on ``PYTHONPATH``, and sets
``AIRFLOW__CORE__HOSTNAME_CALLABLE=airflow_worker_hostname.worker_hostname``. On separate machines
(or containers, as in docker-compose.yml) Airflow's default already tells workers apart.
"""

from __future__ import annotations

import os
import socket


def worker_hostname() -> str:
    """``AIRFLOW_WORKER_HOSTNAME`` when set, else the machine's fully qualified name."""
    return os.environ.get("AIRFLOW_WORKER_HOSTNAME") or socket.getfqdn()

"""``mlflow server`` in one process: takes the same options, e.g.
``python scripts/mlflow-server.py --host 127.0.0.1 --port 5000 --workers 1 --backend-store-uri ...``.

``mlflow server`` checks its options and prepares its stores, then starts uvicorn as a child and
stays behind only to forward signals to it and, when MLflow's job runner is on, to supervise the
runner. With the job runner off (MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false, as the project's stacks
and tests run it) that idle parent holds about 200 MB: here the server process becomes uvicorn
instead (exec), keeping its pid, its signals and its process group. With the job runner on, this is
``mlflow server`` unchanged.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn


def _exec(cmd: Sequence[str], extra_env: Mapping[str, str] | None = None, **_: object) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(cmd[0], list(cmd), {**os.environ, **(extra_env or {})})  # noqa: S606 - uvicorn, as MLflow built it


def main() -> None:
    import mlflow.server
    from mlflow.cli import cli

    if os.environ.get("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "").strip().lower() in ("false", "0"):
        mlflow.server._exec_cmd = _exec  # the one call that starts uvicorn (mlflow.server._run_server)
    cli(["server", *sys.argv[1:]])


if __name__ == "__main__":
    main()

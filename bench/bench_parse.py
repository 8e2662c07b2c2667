"""What the provider costs a DAG file and a submission.

- Import cost a DAG file pays for the operators and sensor, over ``import airflow.sdk`` alone (fresh
  interpreters, alternated; the provider's part timed in the interpreter, after airflow.sdk), and
  which heavy modules that import loads (none allowed).
- DagBag parse of a 200-task TorchX DAG against the same DAG of BashOperators (each parsed in a
  fresh interpreter, so the provider's import counts).
- Submit overhead: ``TorchXOperator``'s path from the task to the app handle against bare
  ``Runner.dryrun`` + ``Runner.schedule`` of the same app on local_cwd.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.common import figure, interleaved, median

HEAVY = (
    "mlflow",
    "s3fs",
    "docker",
    "torchx.schedulers.slurm_scheduler",
    "torchx.schedulers.kubernetes_scheduler",
)
TASKS = 200

_IMPORT = """
import sys, time
t = time.perf_counter()
import airflow.sdk
after_sdk = time.perf_counter()
{extra}
print(time.perf_counter() - t)
print(time.perf_counter() - after_sdk)
print(" ".join(m for m in {heavy!r} if m in sys.modules))
"""

_DAG = """
import pendulum
from airflow.sdk import DAG
{import_line}
with DAG("bench_{kind}", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    for i in range({tasks}):
        {operator}
"""
_OPERATORS = {
    "torchx": (
        "from torchx_airflow.operators.torchx import TorchXOperator",
        'TorchXOperator(task_id=f"t{i}", component="utils.python", '
        'component_args=["--script", "train.py", "--", "--lr", "{{ params.lr }}"])',
    ),
    "bash": (
        "from airflow.providers.standard.operators.bash import BashOperator",
        'BashOperator(task_id=f"t{i}", bash_command="python train.py --lr {{ params.lr }}")',
    ),
}
_PARSE = """
import time, sys
t = time.perf_counter()
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
assert len(next(iter(bag.dags.values())).tasks) == {tasks}
print("SECONDS", time.perf_counter() - t)
"""


def _seconds(lines: list[str]) -> float:
    return float(next(line.split()[1] for line in lines if line.startswith("SECONDS ")))


def _python(code: str, *args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def _import_cost() -> list[dict[str, Any]]:
    extra = "import torchx_airflow.operators.torchx, torchx_airflow.sensors.torchx"
    results: dict[str, list[float]] = {"sdk": [], "provider": []}
    own: list[float] = []  # the provider's import alone, timed in the same interpreter after airflow.sdk
    loaded: set[str] = set()
    for i in range(10):
        for name in ("sdk", "provider") if i % 2 == 0 else ("provider", "sdk"):
            lines = _python(_IMPORT.format(extra=extra if name == "provider" else "", heavy=HEAVY))
            results[name].append(float(lines[0]))
            if name == "provider":
                own.append(float(lines[1]))
                if len(lines) > 2:
                    loaded.update(lines[2].split())
    # Two interpreters' totals differ by tens of ms from one start to the next (the whole of
    # airflow.sdk is timed): the provider's own part is timed where it runs, after airflow.sdk.
    extra_ms = median(own) * 1000
    return [
        figure(
            "import cost of the operators and sensor for a DAG file",
            "`import airflow.sdk` alone",
            "<= +50 ms, no mlflow, s3fs, docker or torchx scheduler module",
            median(results["provider"]),
            median(results["sdk"]),
            "s",
            lambda _r: extra_ms <= 50 and not loaded,
            f"+{extra_ms:.0f} ms (the provider's import after airflow.sdk, timed in-process); heavy modules "
            f"loaded: {sorted(loaded) or 'none'}",
        )
    ]


def _dagbag_parse() -> list[dict[str, Any]]:
    root = Path(tempfile.mkdtemp(prefix="torchx-bench-parse-"))
    files = {}
    for kind, (import_line, operator) in _OPERATORS.items():
        folder = root / kind
        folder.mkdir()
        path = folder / f"bench_{kind}.py"
        path.write_text(
            textwrap.dedent(_DAG).format(kind=kind, import_line=import_line, tasks=TASKS, operator=operator)
        )
        files[kind] = str(folder)
    times: dict[str, list[float]] = {kind: [] for kind in files}  # each parse: a fresh interpreter
    for i in range(8):
        for kind in list(files) if i % 2 == 0 else list(files)[::-1]:
            times[kind].append(_seconds(_python(_PARSE.format(tasks=TASKS), files[kind])))
    return [
        figure(
            f"DagBag parse of a {TASKS}-task TorchX DAG",
            f"the same DAG of {TASKS} BashOperators",
            "<= 1.2x",
            median(times["torchx"]),
            median(times["bash"]),
            "s",
            lambda ratio: ratio <= 1.2,
            "fresh interpreter per parse; the provider's import counts",
        )
    ]


def _submit_overhead() -> list[dict[str, Any]]:
    from torchx.components.utils import echo
    from torchx.runner import get_runner

    from torchx_airflow.operators.torchx import TorchXOperator

    class TI:
        stats_tags: dict[str, str] = {}

        def xcom_push(self, key: str, value: object) -> None:
            pass

    runner = get_runner()
    operators: list[TorchXOperator] = []

    def operator_path() -> None:
        op = TorchXOperator(task_id="bench", component="utils.echo", component_args=["--msg", "x"],
                            tracker_conn_ids=[], stream_logs=False)  # fmt: skip
        op.submit_job({"ti": TI(), "task_state_store": None})
        operators.append(op)

    def bare() -> None:
        runner.schedule(runner.dryrun(echo(msg="x"), "local_cwd", cfg={}))

    times = interleaved({"operator": operator_path, "bare": bare}, repeat=15, warmup=2)
    for op in operators:
        op.hook.close()
    runner.close()
    overhead_ms = (median(times["operator"]) - median(times["bare"])) * 1000
    return [
        figure(
            "submit overhead: operator path to the handle (local_cwd)",
            "bare Runner.dryrun + schedule",
            "<= +50 ms",
            median(times["operator"]),
            median(times["bare"]),
            "s",
            lambda _r: overhead_ms <= 50,
            f"+{overhead_ms:.1f} ms (connection, cfg checks, AppDef build, dry-run summary, env cleaning)",
        )
    ]


def run() -> list[dict[str, Any]]:
    import os

    os.environ.setdefault(
        "AIRFLOW_CONN_TORCHX_DEFAULT",
        json.dumps({"conn_type": "torchx", "extra": {"scheduler": "local_cwd"}}),
    )
    started = time.perf_counter()
    rows = _import_cost() + _dagbag_parse() + _submit_overhead()
    for row in rows:
        row["note"] += f" (module ran {time.perf_counter() - started:.0f} s)" if row is rows[-1] else ""
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)

"""What the provider costs a DAG file and a submission.

- Import cost a DAG file pays for the operators and sensor, over ``import airflow.sdk`` alone (fresh
  interpreters, alternated; the provider's part timed in the interpreter, after airflow.sdk), and
  which heavy modules that import loads (none allowed).
- DagBag parse of a 200-task TorchX DAG against the same DAG of BashOperators (each parsed in a
  fresh interpreter, so the provider's import counts).

Both run with compiled bytecode for every module, the provider's included, as an installed package
has it (pip compiles at install): an editable checkout under ``PYTHONDONTWRITEBYTECODE=1`` would
compile the provider's source in every interpreter while Airflow's comes compiled. The bytecode goes
to a temporary ``PYTHONPYCACHEPREFIX``, written by an untimed first interpreter; the import row also
reports the cost with the provider's source compiled each time.
- Submit overhead: ``TorchXOperator``'s path from the task to the app handle against bare
  ``Runner.dryrun`` + ``Runner.schedule`` of the same app on local_cwd.
"""

from __future__ import annotations

import json
import os
import shutil
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
after_sdk, cpu = time.perf_counter(), time.process_time()
{extra}
print(time.perf_counter() - t)
print(time.perf_counter() - after_sdk)
print(time.process_time() - cpu)
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


def _compiled_env(pycache: Path) -> dict[str, str]:
    """The environment of an interpreter that reads and writes bytecode under ``pycache``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(pycache)}


def _uncompiled_env() -> dict[str, str]:
    """The environment of an interpreter that writes no bytecode (the provider's source is compiled at
    every import; installed packages read the bytecode their install wrote)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    return {**env, "PYTHONDONTWRITEBYTECODE": "1"}


def _python(code: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    command = [sys.executable, "-c", code, *args]
    return subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout.splitlines()


def _import_cost(compiled: dict[str, str]) -> list[dict[str, Any]]:
    extra = "import torchx_airflow.operators.torchx, torchx_airflow.sensors.torchx"
    provider, sdk = _IMPORT.format(extra=extra, heavy=HEAVY), _IMPORT.format(extra="", heavy=HEAVY)
    _python(provider, env=compiled)  # untimed: writes the bytecode
    results: dict[str, list[float]] = {"sdk": [], "provider": []}
    # the provider's import alone, timed in the same interpreter after airflow.sdk: wall, CPU, and
    # wall with its source compiled in every interpreter
    own: dict[str, list[float]] = {"wall": [], "cpu": [], "uncompiled": []}
    loaded: set[str] = set()
    for i in range(10):
        for name in ("sdk", "provider", "uncompiled") if i % 2 == 0 else ("uncompiled", "provider", "sdk"):
            env = _uncompiled_env() if name == "uncompiled" else compiled
            lines = _python(sdk if name == "sdk" else provider, env=env)
            if name == "sdk":
                results["sdk"].append(float(lines[0]))
                continue
            own["wall" if name == "provider" else "uncompiled"].append(float(lines[1]))
            if name == "provider":
                results["provider"].append(float(lines[0]))
                own["cpu"].append(float(lines[2]))
            loaded.update(lines[3].split() if len(lines) > 3 else ())
    # Two interpreters' totals differ by tens of ms from one start to the next (the whole of
    # airflow.sdk is timed): the provider's own part is timed where it runs, after airflow.sdk.
    extra_ms, cpu_ms, uncompiled_ms = (median(own[k]) * 1000 for k in ("wall", "cpu", "uncompiled"))
    return [
        figure(
            "import cost of the operators and sensor for a DAG file",
            "`import airflow.sdk` alone",
            "<= +50 ms, no mlflow, s3fs, docker or torchx scheduler module",
            median(results["provider"]),
            median(results["sdk"]),
            "s",
            lambda _r: extra_ms <= 50 and not loaded,
            f"+{extra_ms:.0f} ms (the provider's import after airflow.sdk, timed in-process; CPU "
            f"{cpu_ms:.0f} ms); with its source compiled in every interpreter (no bytecode written): "
            f"+{uncompiled_ms:.0f} ms; heavy modules loaded: {sorted(loaded) or 'none'}",
        )
    ]


def _dagbag_parse(compiled: dict[str, str]) -> list[dict[str, Any]]:
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
    for i in range(9):  # the first round untimed: it writes the bytecode of what the parse imports
        for kind in list(files) if i % 2 == 0 else list(files)[::-1]:
            seconds = _seconds(_python(_PARSE.format(tasks=TASKS), files[kind], env=compiled))
            if i:
                times[kind].append(seconds)
    shutil.rmtree(root, ignore_errors=True)
    return [
        figure(
            f"DagBag parse of a {TASKS}-task TorchX DAG",
            f"the same DAG of {TASKS} BashOperators",
            "<= 1.2x",
            median(times["torchx"]),
            median(times["bash"]),
            "s",
            lambda ratio: ratio <= 1.2,
            "fresh interpreter per parse, compiled bytecode; the provider's import counts",
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
    os.environ.setdefault(
        "AIRFLOW_CONN_TORCHX_DEFAULT",
        json.dumps({"conn_type": "torchx", "extra": {"scheduler": "local_cwd"}}),
    )
    started = time.perf_counter()
    pycache = Path(tempfile.mkdtemp(prefix="torchx-bench-parse-pycache-"))
    try:
        compiled = _compiled_env(pycache)
        rows = _import_cost(compiled) + _dagbag_parse(compiled) + _submit_overhead()
    finally:
        shutil.rmtree(pycache, ignore_errors=True)
    for row in rows:
        row["note"] += f" (module ran {time.perf_counter() - started:.0f} s)" if row is rows[-1] else ""
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)

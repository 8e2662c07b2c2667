"""DAGs for the cache tests: three steps ``a -> b -> c``, every one cached, each reading the output of
the one before through its XCom (``c`` is a ``@task.torchx``).

``tx_cache`` runs on the connection the test gives (local_cwd, waits in the worker) and
``tx_cache_slurm`` on ``torchx_slurm`` with every wait deferred to the triggerer. The params change
one input of ``b`` at a time (an argument, an env value, the image, the salt, the cfg); ``a`` and ``c``
write to a directory of the DAG run (left out of the key by ``cache_ignore_args``), ``b`` to one its
output's inputs name, so ``c`` runs again only when ``b``'s output changed; every job appends its
name to the ledger file, so the tests count the jobs that really ran. ``a`` is cached by its
connection's default (extra ``cache``), ``b`` and ``c`` by their own ``cache=True``. ``a_hostile``
makes ``a``'s job record a path the launcher must not read; ``tx_cache_other`` is ``tx_cache`` in
another DAG (tests/integration/test_hostile_store_dags.py).
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, Asset, Param, task

from torchx_airflow.operators.torchx import TorchXOperator

STEP_JOB = str(Path(__file__).resolve().parent / "jobs" / "cache_step.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")
OUT = "{{ params.output_dir }}/{{ run_id | replace(':', '-') }}"
LEDGER = {"CACHE_LEDGER": "{{ params.ledger }}"}
SECRET = "cache-Step-Token-5512"  # a: a secret env value, part of its key as a digest only
A_OUT = Asset("torchx-test://tx_cache/a-out")
# b writes where its output's inputs say (as pipelines with deterministic output paths do): a b that
# runs again with the same output (another salt, image or cfg) leaves c's input as it was
B_OUT = "{{ params.output_dir }}/b-{{ params.b_value }}-{{ params.b_env }}"


def _dag(dag_id: str, conn_id: str, deferrable: bool) -> DAG:
    params = {
        "output_dir": Param("/tmp/tx-cache", type="string"),
        "ledger": Param("/tmp/tx-cache/ledger", type="string"),
        "a_value": Param("1", type="string"),
        "a_hostile": Param("", type="string"),
        "b_value": Param("1", type="string"),
        "b_env": Param("x", type="string"),
        "b_image": Param("ghcr.io/pytorch/torchx:0.7.0", type="string"),
        "b_salt": Param("", type="string"),
        "b_cfg": Param({}, type="object"),
        "b_fail": Param("false", type="string"),
    }
    with DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, params=params,
             render_template_as_native_obj=False, tags=["torchx", "cache"]) as dag:  # fmt: skip
        step = {
            "torchx_conn_id": conn_id,
            "poll_interval": 1,
            "deferrable": deferrable,
            "cache_ignore_args": ["--out=*"],
        }
        a = TorchXOperator(
            task_id="a",
            component="utils.python",
            component_args=[
                "--script",
                STEP_JOB,
                "--",
                "--name",
                "a",
                "--value",
                "{{ params.a_value }}",
                "--out",
                f"{OUT}/a",
            ],  # fmt: skip
            env={**LEDGER, "API_TOKEN": SECRET, "CACHE_HOSTILE_ARTIFACT": "{{ params.a_hostile }}"},
            outlets=[A_OUT],
            artifact_assets={"out": A_OUT},
            **step,
        )
        b = TorchXOperator(
            task_id="b",
            component="utils.python",
            component_args=[
                "--image",
                "{{ params.b_image }}",
                "--script",
                STEP_JOB,
                "--",
                "--name",
                "b",
                "--value",
                "{{ params.b_value }}",
                "--fail",
                "{{ params.b_fail }}",
                "--in",
                "{{ ti.xcom_pull(task_ids='a')['artifacts']['out']['path'] }}",
                "--out",
                B_OUT,
            ],  # fmt: skip
            env={**LEDGER, "STEP_ENV": "{{ params.b_env }}"},
            cfg="{{ params.b_cfg | tojson }}",
            cache=True,
            cache_salt="{{ params.b_salt }}",
            **step,
        )

        @task.torchx(env=LEDGER, cache=True, **step)
        def c(params=None, ti=None, run_id=None):
            """The last step, decorated: its input is b's output."""
            upstream = ti.xcom_pull(task_ids="b")["artifacts"]["out"]["path"]
            out = f"{params['output_dir']}/{run_id.replace(':', '-')}/c"
            return (
                "utils.python",
                ["--script", STEP_JOB, "--", "--name", "c", "--in", upstream, "--out", out],
            )

        a >> b >> c()
    return dag


tx_cache = _dag("tx_cache", "torchx_default", deferrable=False)
tx_cache_slurm = _dag("tx_cache_slurm", "torchx_slurm", deferrable=True)
tx_cache_other = _dag("tx_cache_other", "torchx_default", deferrable=False)  # the same steps, another DAG

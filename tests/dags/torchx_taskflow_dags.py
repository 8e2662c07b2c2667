"""DAGs for the ``@task.torchx`` tests: decorated tasks (mapped, AppDef, component) next to classic ones.

``tf_local`` runs on the connection the test gives (local_cwd) and ``tf_slurm`` on ``torchx_slurm``;
both have the same shape: a classic ``prepare``, a decorated ``train`` mapped over learning rates, a
decorated ``summary`` returning an ``AppDef``, and a classic ``join`` downstream of both.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from torchx_airflow.operators.torchx import TorchXOperator

JOBS = Path(__file__).resolve().parents[1] / "jobs"
HELLO = str(Path(__file__).resolve().parents[2] / "dags" / "jobs" / "hello.py")
TRACKED = str(JOBS / "tracked_job.py")
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id=dag_id, schedule=None, start_date=START, catchup=False, tags=["torchx", "taskflow"])


def _pipeline(conn_id: str, deferrable: bool) -> None:
    step = {"torchx_conn_id": conn_id, "poll_interval": 0.5, "deferrable": deferrable}
    # Deferred apps last a few seconds: Airflow fails a resumed task when the executor reports the exit
    # of its deferring process only after the resumed one started (seen on a loaded 2-core machine).
    sleep = "2" if deferrable else "0"
    prepare = TorchXOperator(
        task_id="prepare",
        component="utils.python",
        component_args=["--script", HELLO, "--", "--name", "prepare", "--steps", "4", "--sleep", sleep],
        **step,
    )

    @task.torchx(env={"TRACKED_JOB_SLEEP": str(4 * float(sleep))}, **step)
    def train(lr: float, dag_run=None):
        """A component with arguments, one app per learning rate; the model path comes from the conf."""
        out = f"{dag_run.conf['out']}/model-{lr}.txt"
        return ("utils.python", ["--script", TRACKED, "--", out, str(lr)])

    @task.torchx(env={"GREETING": "from an AppDef"}, **step)
    def summary():
        """An AppDef built by hand; its args are templated like TorchXOperator's."""
        from torchx import specs

        role = specs.Role(
            name="summary",
            image="",
            entrypoint="python",
            args=[
                HELLO,
                "--name",
                "{{ dag_run.conf.get('who', 'AppDef') }}",
                "--steps",
                "4",
                "--sleep",
                sleep,
            ],
        )
        return specs.AppDef(name="ignored", roles=[role])

    join = TorchXOperator(
        task_id="join",
        component="utils.python",
        component_args=["--script", HELLO, "--", "--name", "join", "--steps", "4", "--sleep", sleep],
        **step,
    )
    trained = train.expand(lr=[0.1, 0.4])
    prepare >> trained >> join
    prepare >> summary() >> join


with _dag("tf_local"):
    _pipeline("torchx_default", deferrable=False)

with _dag("tf_slurm"):
    _pipeline("torchx_slurm", deferrable=True)

with _dag("tf_bad_return"):

    @task.torchx
    def bad():
        """Returns a dict, which is not an app."""
        return {"script": HELLO}

    bad()

with _dag("tf_fail"):

    @task.torchx(poll_interval=0.5)
    def failing():
        return ("utils.python", f"--script {HELLO} -- --steps 1 --fail")

    failing()

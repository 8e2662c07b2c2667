"""Nothing is submitted when a tracker is bad, unreachable or hangs: ``TorchXOperator.execute`` driven
end to end with a real local_cwd hook whose ``schedule`` fails the test if it is ever called.

The operator opens its trackers before it submits (``submit_job``: ``trackers.check_within`` before
``DurableSubmission.submit``); a check moved after the submission would leave an app running whose
lineage and results no tracker can hold.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes import TI, TaskStateStore
from tests.services import free_port
from torchx_airflow.exceptions import TorchXConnectionError, TorchXError
from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.operators.torchx import TorchXOperator


class NoSubmitHook(TorchXHook):
    """The real hook of the tests' local_cwd connection, except that submitting fails the test."""

    def schedule(self, *args: Any, **kwargs: Any) -> str:
        pytest.fail("schedule() was called: the app was submitted although a tracker failed its check")


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A TCP server on loopback that accepts every connection and never answers: a hung tracker."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in accepted:  # the blocked client now sees its connection closed and gives up
            conn.close()
        server.close()


def _mlflow_conn(monkeypatch, conn_id: str, port: int) -> None:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps({"conn_type": "mlflow", "host": f"http://127.0.0.1:{port}"}),
    )


def _execute(conn_id: str, tracker_timeout: float) -> tuple[pytest.ExceptionInfo, TI]:
    op = TorchXOperator(
        task_id="train",
        component="utils.echo",
        tracker_conn_ids=[conn_id],
        tracker_timeout=tracker_timeout,
        poll_interval=0.1,
        stream_logs=False,
    )
    op.__dict__["hook"] = NoSubmitHook("torchx_default")
    ti = TI()
    with pytest.raises(Exception) as raised:
        op.execute({"ti": ti, "task_state_store": TaskStateStore()})
    return raised, ti


def test_a_bad_tracker_connection_fails_the_task_before_anything_is_submitted(monkeypatch, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(
        "AIRFLOW_CONN_BAD_STORE",
        json.dumps({"conn_type": "torchx_fsspec", "extra": {"root": str(blocked / "runs")}}),
    )
    raised, ti = _execute("bad_store", tracker_timeout=30)
    assert raised.type is TorchXConnectionError, raised.getrepr()
    assert "'bad_store' (fsspec) cannot be opened" in str(raised.value)
    assert "Nothing was submitted" in str(raised.value)
    assert ti.pushed == {}


def test_an_unreachable_tracker_fails_the_task_before_anything_is_submitted(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    _mlflow_conn(monkeypatch, "closed_port", free_port())  # nothing listens there
    raised, ti = _execute("closed_port", tracker_timeout=30)
    assert raised.type is TorchXConnectionError, raised.getrepr()
    assert "'closed_port' (mlflow) cannot be opened" in str(raised.value)
    assert "Nothing was submitted" in str(raised.value)
    assert ti.pushed == {}


def test_a_hanging_tracker_fails_the_task_at_tracker_timeout_before_anything_is_submitted(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "600")  # only tracker_timeout may end the wait
    with silent_server() as port:
        _mlflow_conn(monkeypatch, "hung", port)
        raised, ti = _execute("hung", tracker_timeout=2)
    assert raised.type is TorchXError, raised.getrepr()
    assert "did not answer within tracker_timeout=2 s" in str(raised.value)
    assert "Nothing was submitted" in str(raised.value)
    assert ti.pushed == {}

"""A hostile job of the same deployment after a three-point sweep, on a local fsspec store, through a
real DAG run (``airflow dags test``, local_cwd; ``tx_hostile_sweep``): it plants links to
``/proc/self/environ`` and to a secret file in the sweep's run directories and its own, removes their
index markers, writes a better loss into one grid point's run and points another's model at its own
file, all through TorchX's tracker API and the store's files. No secret of the worker (an
environment variable it holds, the secret file's content) reaches any file or name of the store or
the task logs, through the worker's writes (usage, the promotion's record), the readers the views
use, or ``reindex``; the promotion publishes the honest best with its own model.

The output roots cover the attacker's file (``output_roots`` is the sweep's parent directory), so it
is the worker's record of each run, taken when the run ended, that keeps the promotion honest."""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
import urllib.parse
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

LOSSES = [0.4, 0.2, 0.3]


def _forms(secret: str) -> list[str]:
    """The forms a secret takes: as is, base64 (standard and URL-safe, unpadded), URL-encoded, hex."""
    raw = secret.encode()
    return [
        secret,
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        urllib.parse.quote(secret, safe=""),
        raw.hex(),
    ]


def _decoded_names(name: str) -> list[str]:
    """A store name and what its dot-separated parts decode to (base32 keys of ids and names)."""
    found = [name]
    for part in name.split("."):
        try:
            found.append(base64.b32decode(part).decode("utf-8", "replace"))
        except (binascii.Error, ValueError):
            continue
    return found


def _leaks(root: Path, secrets: list[str]) -> list[str]:
    """Every regular file (its content) and every name under ``root`` that holds a secret in any form;
    links are looked at, never followed."""
    forms = [form for secret in secrets for form in _forms(secret)]
    leaks = []
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            if any(form in text for text in _decoded_names(name) for form in forms):
                leaks.append(f"name {path}")
            if name in files and stat.S_ISREG(path.lstat().st_mode):
                text = path.read_bytes().decode("utf-8", "replace")
                if any(form in text for form in forms):
                    leaks.append(f"content {path}")
    return leaks


def test_a_hostile_job_after_a_sweep_leaks_no_secret_and_the_honest_best_is_promoted(
    run_dag, tmp_path, monkeypatch
):
    from torchx_airflow_tracker.fsspec_store import FsspecStore

    from torchx_airflow.lineage.stores import TrackerBackend

    out, store_root = tmp_path / "runs", tmp_path / "store"
    env_secret, file_secret = f"env-canary-{uuid.uuid4().hex}", f"file-canary-{uuid.uuid4().hex}"
    secret_file = tmp_path / "secret.key"
    secret_file.write_text(file_secret)
    extra = {"scheduler": "local_cwd", "trackers": ["hostile_fs"], "output_roots": [str(out)]}
    env = {
        "AIRFLOW_CONN_TORCHX_DEFAULT": json.dumps({"conn_type": "torchx", "extra": extra}),
        "AIRFLOW_CONN_HOSTILE_FS": json.dumps(
            {"conn_type": "torchx_fsspec", "extra": {"root": str(store_root)}}
        ),
        "TX_WORKER_CANARY": env_secret,  # in the worker's /proc/self/environ
    }
    result = run_dag("tx_hostile_sweep", conf={"out": str(out), "secret": str(secret_file)}, env=env)
    expected = {"train[0]": "success", "train[1]": "success", "train[2]": "success"}
    assert result.states == {**expected, "attack": "success", "promote": "success"}, result.output[-6000:]
    assert "attacked 3 runs" in result.output

    handles = [result.xcom("train", map_index=i)["app_handle"] for i in range(3)]
    promoted = result.xcom("promote")
    assert promoted["app_handle"] == handles[1] and promoted["value"] == min(LOSSES)
    assert promoted["path"] == str(out / "train-1" / "model.txt")  # its own model, not the attacker's
    reader = FsspecStore(str(store_root))
    assert reader.metadata(handles[0])["loss"] == 0.0001  # the forged loss is in the store...
    assert reader.artifacts(handles[1])["model"].path == str(out / "attack" / "model.txt")  # ...and the model
    assert reader.metadata(handles[1])["airflow_promoted"]["asset"] == "model://tx_hostile_sweep/best"

    # what the views and the command line do, in a process holding the secret too
    monkeypatch.setenv("TX_WORKER_CANARY", env_secret)
    view = TrackerBackend("hostile_fs", "fsspec", {"root": str(store_root)}).open_store()
    for run_id in [*handles, *view.run_ids()]:
        view.metadata(run_id), view.artifacts(run_id), list(view.sources(run_id))
    view.graph()
    FsspecStore(str(store_root)).ensure_indexed()  # reindex: a writer reading every run
    FsspecStore(str(store_root)).add_metadata(handles[2], note="a later write to an attacked run")

    assert _leaks(store_root, [env_secret, file_secret]) == []
    assert not any(form in result.output for form in _forms(env_secret) + _forms(file_secret))
    links = [p for p in store_root.rglob("*") if p.is_symlink()]
    assert len(links) == 4 * 6  # every planted link is still there, refused, never replaced by content

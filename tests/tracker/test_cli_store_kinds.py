"""The lineage command on a store that keeps no lineage graph says which stores do."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def test_lineage_of_a_store_without_edges_names_the_stores_that_have_them(tmp_path):
    # TORCHX_TRACKERS picks the store: airflow_stores is a MultiStore, which forwards writes and keeps
    # no lineage graph of its own
    config = json.dumps([{"kind": "fsspec", "config": {"root": str(tmp_path)}}])
    env = {**os.environ, "TORCHX_TRACKERS": "airflow_stores", "TORCHX_TRACKER_AIRFLOW_STORES_CONFIG": config}
    for command in (["lineage", "x://s/eval"], ["show", "x://s/eval"]):
        proc = subprocess.run(
            [sys.executable, "-m", "torchx_airflow_tracker", *command],
            env=env,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 1, proc
        assert "keeps no lineage graph: pass --fsspec URL or --mlflow URI" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr

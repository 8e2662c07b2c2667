"""The lineage command: a run's metadata, artifacts, parents, descendants and graph."""

from __future__ import annotations

import json
import subprocess
import sys

from torchx_airflow_tracker.cli import main
from torchx_airflow_tracker.fsspec_store import FsspecStore


def _store(tmp_path) -> str:
    store = FsspecStore(str(tmp_path))
    store.add_metadata("x://s/train", lr=0.1)
    store.add_artifact("x://s/train", "model", "/m.pt")
    store.add_source("x://s/train", "x://s/prep", "data")
    store.add_source("x://s/eval", "x://s/train", "model")
    return str(tmp_path)


def test_show_text_and_json(tmp_path, capsys):
    root = _store(tmp_path)
    main(["--fsspec", root, "show", "x://s/train"])
    text = capsys.readouterr().out
    assert "lr = 0.1" in text and "model: /m.pt" in text
    assert "x://s/prep [data]" in text and "x://s/eval [model]" in text
    main(["--fsspec", root, "show", "x://s/train", "--format", "json"])
    info = json.loads(capsys.readouterr().out)
    assert info["parents"] == [{"source": "x://s/prep", "run": "x://s/train", "artifact_names": ["data"]}]


def test_lineage_formats_through_the_console_entry(tmp_path):
    root = _store(tmp_path)
    run = [sys.executable, "-m", "torchx_airflow_tracker", "--fsspec", root, "lineage", "x://s/eval"]
    text = subprocess.run(run, check=True, capture_output=True, text=True).stdout
    assert text.splitlines() == ["x://s/eval", "  <- x://s/train [model]", "    <- x://s/prep [data]"]
    mermaid = subprocess.run([*run, "--format", "mermaid"], check=True, capture_output=True, text=True).stdout
    assert mermaid.startswith("flowchart LR") and "-->|model|" in mermaid
    graph = json.loads(
        subprocess.run([*run, "--format", "json"], check=True, capture_output=True, text=True).stdout
    )
    assert len(graph["upstream"]) == 2


def test_list_by_parent(tmp_path, capsys):
    main(["--fsspec", _store(tmp_path), "list", "--parent", "x://s/prep"])
    assert capsys.readouterr().out.split() == ["x://s/train"]

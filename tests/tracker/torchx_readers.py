"""TorchX's own ``FsspecTracker``, of TorchX 0.7 (installed) and of TorchX main (the torchx-nightly
wheel the Makefile pins, fetched with pip and imported from its unpacked files), and TorchX 0.7's
``MLflowTracker`` (TorchX main has none), each run in a subprocess so the two ``torchx`` packages
never meet in one interpreter and MLflow's process-wide tracking URI stays the test's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_READ = """
import json, sys, fsspec, torchx
from torchx.tracker.backend.fsspec import FsspecTracker
root, parents, runs = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
t = FsspecTracker(fsspec.filesystem("file"), root)
print(json.dumps({
    "version": torchx.__version__,
    "run_ids": sorted(t.run_ids()),
    "children": {p: sorted(t.run_ids(parent_run_id=p)) for p in parents},
    "metadata": {r: t.metadata(r) for r in runs},
    "sources": {r: sorted([s.source_run_id, s.artifact_name or ""] for s in t.sources(r)) for r in runs},
}))
"""

_WRITE = """
import json, sys, fsspec
from torchx.tracker.backend.fsspec import FsspecTracker
t = FsspecTracker(fsspec.filesystem("file"), sys.argv[1])
for op, args in json.loads(sys.argv[2]):
    getattr(t, op)(*args[:-1], **args[-1]) if op == "add_metadata" else getattr(t, op)(*args)
"""


_READ_MLFLOW = """
import json, sys
from torchx.tracker.mlflow import MLflowTracker
uri, experiment, runs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
t = MLflowTracker(experiment_name=experiment, tracking_uri=uri)
run_ids = sorted(str(r) for r in t.run_ids())
mlflow_ids = {}
for r in runs:  # get_run makes the run active (TorchX's way); one at a time
    mlflow_ids[r] = t.get_run_id(r)
    t.close()
print(json.dumps({"run_ids": run_ids, "mlflow_ids": mlflow_ids}))  # the last line: MLflow prints too
"""


def nightly_version() -> str:
    match = re.search(r"^TORCHX_NIGHTLY \?= (\S+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert match, "TORCHX_NIGHTLY is not set in the Makefile"
    return match.group(1)


def fetch_torchx_main(workdir: Path) -> Path:
    """The pinned torchx-nightly wheel unpacked in ``workdir``: a directory to put on PYTHONPATH."""
    spec = f"torchx-nightly=={nightly_version()}"
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", spec, "-d", str(workdir)]
    subprocess.run(command, check=True, capture_output=True)
    (wheel,) = workdir.glob("torchx_nightly-*.whl")
    target = workdir / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


def _python(code: str, args: list[str], torchx_path: Path | None) -> str:
    # a reader, not a job: no job id, trackers or parent run of whatever ran before in this process
    job_side = ("TORCHX_JOB_ID", "TORCHX_TRACKER", "TORCHX_PARENT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(job_side)}
    if torchx_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(torchx_path), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, check=True, capture_output=True, text=True
    )
    return out.stdout


def torchx_reads(root: Path, parents: list[str], runs: list[str], torchx_path: Path | None) -> dict:
    """What TorchX's reader answers on ``root``: run ids, children of ``parents``, and per run of
    ``runs`` its metadata and sources. ``torchx_path`` None: TorchX 0.7 (installed)."""
    return json.loads(_python(_READ, [str(root), json.dumps(parents), json.dumps(runs)], torchx_path))


def torchx_writes(root: Path, ops: list[tuple[str, list]], torchx_path: Path | None) -> None:
    """Apply ``[(method, args)]`` through TorchX's tracker on ``root`` (add_metadata: last arg kwargs)."""
    root.mkdir(parents=True, exist_ok=True)
    _python(_WRITE, [str(root), json.dumps(ops)], torchx_path)


def torchx_mlflow_reads(tracking_uri: str, experiment: str, runs: list[str]) -> dict:
    """What TorchX 0.7's ``MLflowTracker`` answers on ``experiment``: its run ids, and the MLflow run
    it resolves for each of ``runs`` (TorchX finds a run by its name, and refuses a name held twice)."""
    out = _python(_READ_MLFLOW, [tracking_uri, experiment, json.dumps(runs)], None)
    return json.loads(out.strip().splitlines()[-1])

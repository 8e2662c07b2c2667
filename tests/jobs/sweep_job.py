"""One grid point of a sweep: records its loss (metadata) and a model artifact, or fails when told."""

from __future__ import annotations

import sys
from pathlib import Path

from torchx.tracker.api import AppRun

out, loss = Path(sys.argv[1]), float(sys.argv[2])
run = AppRun.run_from_env()
out.mkdir(parents=True, exist_ok=True)
(out / "model.txt").write_text(f"weights with loss {loss}")
run.add_metadata(loss=loss)
run.add_artifact("model", str(out / "model.txt"), {"format": "txt"})
if "fail" in sys.argv[3:]:
    sys.exit(f"grid point {out.name} fails on purpose (loss {loss} is never promoted)")
print(f"grid point {out.name}: loss {loss}", flush=True)

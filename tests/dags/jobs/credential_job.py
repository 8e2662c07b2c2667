"""A job for the credential matrix: records an artifact whose URL carries user info (what a job may
write), prints the names of the variables it got and a digest of each value that must arrive."""

from __future__ import annotations

import hashlib
import os
import sys

from torchx.tracker.api import AppRun

# the job builds this URL itself: the DAG never sees it (what the job controls)
ARTIFACT_PATH = "https://bob:" + "artifact-Url-" + "Secret-5523@models.example/resnet.pt"

run = AppRun.run_from_env()
if list(run.backends):
    run.add_artifact("model", ARTIFACT_PATH)
for name in sorted(os.environ):
    print(f"ENV-NAME {name} .", flush=True)
for name in sys.argv[1:]:
    digest = hashlib.sha256(os.environ.get(name, "").encode()).hexdigest()
    print(f"ENV-SHA256 {name} {digest}", flush=True)

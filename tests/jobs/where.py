"""A TorchX job that says where it runs: its label, its rank when torchrun started it, and its node."""

from __future__ import annotations

import os
import socket
import sys

label = sys.argv[1] if len(sys.argv) > 1 else "job"
rank, local_rank = os.environ.get("RANK", "-"), os.environ.get("LOCAL_RANK", "-")
print(f"{label} rank={rank} local_rank={local_rank} host={socket.gethostname()}", flush=True)

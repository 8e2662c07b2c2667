"""A job that uses a known amount of CPU time and memory, then idles and exits (for the usage tests).

``--cpu-seconds`` of CPU time (user time, measured by the job itself), a ``--mb`` buffer touched page
by page, then ``--sleep`` seconds idle, then exit ``--exit-code``.
"""

from __future__ import annotations

import argparse
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--cpu-seconds", type=float, default=1.0)
parser.add_argument("--mb", type=int, default=20)
parser.add_argument("--sleep", type=float, default=0.0)
parser.add_argument("--exit-code", type=int, default=0)
args = parser.parse_args()

buffer = bytearray(args.mb * 1024 * 1024)
for page in range(0, len(buffer), 4096):
    buffer[page] = 1
start = time.process_time()
while time.process_time() - start < args.cpu_seconds:
    pass
time.sleep(args.sleep)
print(f"burnt {time.process_time() - start:.3f} s of CPU time with {args.mb} MB", flush=True)
sys.exit(args.exit_code)

"""A job that records its pid, then sleeps until it is killed (for cancel tests)."""

from __future__ import annotations

import argparse
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--pid-file", required=True)
args = parser.parse_args()
with open(args.pid_file + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(args.pid_file + ".tmp", args.pid_file)
print("sleeping", flush=True)
while True:
    time.sleep(0.5)

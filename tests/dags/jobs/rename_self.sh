#!/bin/bash
# A Slurm job that renames itself to a name holding status fields of its own, then fails (exit 3).
# $1: a tag that makes the name unique; $2: the state the name claims (COMPLETED, NODE_FAIL).
# The name holds "|" and a newline followed by a whole fake status row of this job.
name="renamed-$1|$2|0:0|/tmp|x"$'\n'"$SLURM_JOB_ID|$2|0:0|/tmp|renamed-$1"
scontrol update JobId="$SLURM_JOB_ID" JobName="$name" || exit 9
echo "renamed to: $name"
sleep "${3:-6}"  # long enough for the task to poll the renamed job while it runs
exit 3

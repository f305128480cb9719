#!/usr/bin/env bash
# Run a command in the background, at a lower CPU priority, while another runs in the foreground;
# print the background command's output when both have ended, then, if the foreground command
# failed, its pytest summary lines again (a CI log shows its end). Fails when either failed.
#
#   beside.sh TITLE 'BACKGROUND COMMAND' FOREGROUND COMMAND...
#
# `make test` runs the compatibility tier (CPU-bound: pytest-xdist, venv builds) beside the whole
# suite (mostly waiting on Slurm, Airflow and the stand-ins). Interrupted, it stops both.
set -uo pipefail
title=$1 background=$2
shift 2
log=$(mktemp) foreground_log=$(mktemp)
set -m # the background command gets a process group of its own, stopped as one
nice -n 10 bash -c "$background" >"$log" 2>&1 </dev/null &
pid=$!
set +m
stop_background() {
	kill -TERM -- "-$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
}
trap 'stop_background; rm -f "$log" "$foreground_log"; exit 130' INT TERM
trap 'rm -f "$log" "$foreground_log"' EXIT

# Unbuffered: through the pipe, Python would print the suite's progress in 8 KiB blocks.
PYTHONUNBUFFERED=1 "$@" 2>&1 | tee "$foreground_log"
foreground=${PIPESTATUS[0]}
echo "== $title (ran beside the command above; waiting for it to end)"
wait "$pid"
background_rc=$?
cat "$log"
if ((foreground != 0 || background_rc != 0)); then
	# The suite's own summary scrolled by before the background output: repeat what failed, last.
	if ((foreground != 0)); then
		echo "== what failed in the command above"
		grep -E '^(FAILED|ERROR) ' "$foreground_log" | cut -c1-400
		tail -n 1 "$foreground_log"
	fi
	echo "beside.sh: the suite exited with $foreground, $title with $background_rc" >&2
	exit 1
fi

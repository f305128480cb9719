#!/bin/bash
#SBATCH --job-name=pathways-service
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --open-mode=append
#
# Sandbox stand-in for the Pathways service job of a Cluster Director cluster
# (see README.md). Submit it with sbatch; it is configured by environment variables:
#
#   SLICE_SHAPE   TPU topology of one slice, e.g. 2x4 (required)
#   MIN_SLICES    slices that must run before cluster.env is written (required)
#   MAX_SLICES    array tasks (= TPU slices) to submit (required)
#   GCS_BUCKET    bucket name (or gs://name) for the scratch location (required)
#   TPU_VERSION   TPU generation for --instance_type (default v6e)
#   PATHWAYS_CLUSTER_ENV      file to write (default $HOME/pathways/cluster.env)
#   PATHWAYS_WORKER_SCRIPT    worker array script (default: next to this script, else
#                             $HOME/pathways/bin/run_worker_slice.sh)
#   PATHWAYS_WORKER_PARTITION partition of the worker array (default: this job's partition)
#   PATHWAYS_LOG_DIR          worker array output dir (default $HOME/pathways/logs)
#   PATHWAYS_PROXY_PORT / PATHWAYS_RM_PORT  fixed ports (default 0: any free port)
#   PATHWAYS_POLL_SECONDS     squeue polling interval (default 1)
#   PATHWAYS_RELEASE_REQUEUED 1: release requeued slices at once (scontrol update ...
#                             starttime=now) instead of letting Slurm hold them ~2 minutes,
#                             like Cluster Director recreating a slice's nodes (default 0)
#   PATHWAYS_AS_PUBLISHED     1: do only what the published documentation promises: submit the
#                             worker script as an array under the name sbatch gives it (its file
#                             name), name the array nowhere and this job nowhere in the array (nor
#                             in its output file's name), and write only JAX_BACKEND_TARGET to
#                             $HOME/pathways/cluster.env (PATHWAYS_CLUSTER_ENV is ignored) (default 0)
#   PATHWAYS_CANCEL_WORKERS_ON_EXIT  1: cancel the worker array when this job ends (scancel,
#                             time limit); 0: leave it running, as nothing published promises that
#                             the service cleans up its workers (default 1)
#
# The resource manager and the IFRT proxy are small TCP listeners that answer one banner line.
# Exit codes: 2 bad input, 3 stand-in servers failed, 4 worker array could not be submitted,
# 5 worker array vanished; 143 after SIGTERM (scancel).
set -euo pipefail
umask 022

log() { printf '%s [pathways-service] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"; }
fail() {
	local code=$1
	shift
	log "ERROR: $*" >&2
	exit "$code"
}

# ----------------------------------------------------------------------------- validation
SLICE_SHAPE=${SLICE_SHAPE:-}
MIN_SLICES=${MIN_SLICES:-}
MAX_SLICES=${MAX_SLICES:-}
GCS_BUCKET=${GCS_BUCKET:-}
TPU_VERSION=${TPU_VERSION:-v6e}
POLL=${PATHWAYS_POLL_SECONDS:-1}
PROXY_PORT=${PATHWAYS_PROXY_PORT:-0}
RM_PORT=${PATHWAYS_RM_PORT:-0}
RELEASE_REQUEUED=${PATHWAYS_RELEASE_REQUEUED:-0}
AS_PUBLISHED=${PATHWAYS_AS_PUBLISHED:-0}
CANCEL_WORKERS=${PATHWAYS_CANCEL_WORKERS_ON_EXIT:-1}
BIND_HOST=127.0.0.1

[[ $SLICE_SHAPE =~ ^[1-9][0-9]{0,3}(x[1-9][0-9]{0,3}){1,2}$ ]] ||
	fail 2 "SLICE_SHAPE must look like 2x4 or 4x4x4, got '$SLICE_SHAPE'"
[[ $MIN_SLICES =~ ^[1-9][0-9]{0,3}$ ]] || fail 2 "MIN_SLICES must be a positive integer, got '$MIN_SLICES'"
[[ $MAX_SLICES =~ ^[1-9][0-9]{0,3}$ ]] || fail 2 "MAX_SLICES must be a positive integer, got '$MAX_SLICES'"
((MIN_SLICES <= MAX_SLICES)) || fail 2 "MIN_SLICES ($MIN_SLICES) must not exceed MAX_SLICES ($MAX_SLICES)"
((MAX_SLICES <= 1000)) || fail 2 "MAX_SLICES must be at most 1000 (Slurm MaxArraySize), got $MAX_SLICES"
GCS_BUCKET=${GCS_BUCKET#gs://}
GCS_BUCKET=${GCS_BUCKET%/}
[[ $GCS_BUCKET =~ ^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$ ]] ||
	fail 2 "GCS_BUCKET must be a bucket name (or gs://name), got '${GCS_BUCKET}'"
[[ $TPU_VERSION =~ ^v[0-9]+[a-z0-9]*$ ]] || fail 2 "TPU_VERSION must look like v6e or v5p, got '$TPU_VERSION'"
[[ $POLL =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail 2 "PATHWAYS_POLL_SECONDS must be a number, got '$POLL'"
[[ $PROXY_PORT =~ ^(0|[1-9][0-9]{0,4})$ ]] && ((PROXY_PORT < 65536)) || fail 2 "bad PATHWAYS_PROXY_PORT '$PROXY_PORT'"
[[ $RM_PORT =~ ^(0|[1-9][0-9]{0,4})$ ]] && ((RM_PORT < 65536)) || fail 2 "bad PATHWAYS_RM_PORT '$RM_PORT'"
[[ $RELEASE_REQUEUED == [01] ]] || fail 2 "PATHWAYS_RELEASE_REQUEUED must be 0 or 1, got '$RELEASE_REQUEUED'"
[[ $AS_PUBLISHED == [01] ]] || fail 2 "PATHWAYS_AS_PUBLISHED must be 0 or 1, got '$AS_PUBLISHED'"
[[ $CANCEL_WORKERS == [01] ]] || fail 2 "PATHWAYS_CANCEL_WORKERS_ON_EXIT must be 0 or 1, got '$CANCEL_WORKERS'"
[[ ${SLURM_JOB_ID:-} =~ ^[0-9]+$ ]] || fail 2 "run this script with sbatch (SLURM_JOB_ID is not set)"
SERVICE_JOB_ID=$SLURM_JOB_ID

: "${HOME:=$(getent passwd "$(id -un)" | cut -d: -f6)}"
CLUSTER_ENV=${PATHWAYS_CLUSTER_ENV:-$HOME/pathways/cluster.env}
((AS_PUBLISHED)) && CLUSTER_ENV=$HOME/pathways/cluster.env
LOG_DIR=${PATHWAYS_LOG_DIR:-$HOME/pathways/logs}
WORKER_PARTITION=${PATHWAYS_WORKER_PARTITION:-${SLURM_JOB_PARTITION:-}}
[[ -z $WORKER_PARTITION || $WORKER_PARTITION =~ ^[A-Za-z0-9_.-]+$ ]] ||
	fail 2 "bad PATHWAYS_WORKER_PARTITION '$WORKER_PARTITION'"
[[ $CLUSTER_ENV == /* ]] || fail 2 "PATHWAYS_CLUSTER_ENV must be an absolute path, got '$CLUSTER_ENV'"

WORKER_SCRIPT=${PATHWAYS_WORKER_SCRIPT:-}
if [[ -z $WORKER_SCRIPT ]]; then
	# Under sbatch, $0 is Slurm's spooled copy of this script, so the first candidate only
	# helps when the script is run by hand; the second is where up.sh installs the scripts.
	for candidate in "$(dirname -- "$0")/run_worker_slice.sh" "$HOME/pathways/bin/run_worker_slice.sh"; do
		if [[ -r $candidate ]]; then
			WORKER_SCRIPT=$candidate
			break
		fi
	done
fi
[[ -n $WORKER_SCRIPT && -r $WORKER_SCRIPT ]] || fail 2 "worker script not found (set PATHWAYS_WORKER_SCRIPT)"

INSTANCE_TYPE=tpu$TPU_VERSION:$SLICE_SHAPE
SCRATCH=gs://$GCS_BUCKET/pathways-scratch/shared
PYTHON=${PATHWAYS_PYTHON:-}
if [[ -z $PYTHON ]]; then
	if [[ -x /usr/bin/python3 ]]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi

# ----------------------------------------------------------------------------- cleanup
RUNDIR=$(mktemp -d "${TMPDIR:-/tmp}/pathways-service-$SERVICE_JOB_ID.XXXXXX")
ARRAY_JOB_ID=""
CHILD_PIDS=()
cleanup() {
	trap - EXIT TERM INT
	if [[ -n $ARRAY_JOB_ID ]] && ((CANCEL_WORKERS)); then
		log "cancelling worker array $ARRAY_JOB_ID"
		scancel -Q "$ARRAY_JOB_ID" 2>/dev/null || true
	fi
	if ((${#CHILD_PIDS[@]})); then
		kill -TERM "${CHILD_PIDS[@]}" 2>/dev/null || true
	fi
	rm -rf -- "$RUNDIR"
}
trap cleanup EXIT
trap 'log "received SIGTERM: shutting down"; cleanup; exit 143' TERM
trap 'log "received SIGINT: shutting down"; cleanup; exit 130' INT

# ----------------------------------------------------------------------------- stand-in servers
# One small TCP server per component: binds BIND_HOST:PORT (0 = any free port), publishes the
# port through a file, answers every connection with one banner line.
STANDIN_PY='
import os, signal, socket, sys
role, host, port, port_file, banner = sys.argv[1:6]
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
srv = socket.create_server((host, int(port)), reuse_port=False)
tmp = port_file + ".tmp"
with open(tmp, "w") as f:
    f.write("%d\n" % srv.getsockname()[1])
os.replace(tmp, port_file)
line = ("%s%d\n" % (banner, srv.getsockname()[1])).encode()
while True:
    conn, _ = srv.accept()
    try:
        conn.sendall(line)
    except OSError:
        pass
    finally:
        conn.close()
'

start_standin() { # role port banner -> prints the bound port
	local role=$1 port=$2 banner=$3 port_file=$RUNDIR/$1.port
	"$PYTHON" -c "$STANDIN_PY" "$role" "$BIND_HOST" "$port" "$port_file" "$banner" \
		>>"$RUNDIR/$role.log" 2>&1 &
	CHILD_PIDS+=("$!")
	local pid=$! end=$((SECONDS + 15))
	until [[ -s $port_file ]]; do
		kill -0 "$pid" 2>/dev/null || fail 3 "$role stand-in exited: $(tail -n 5 "$RUNDIR/$role.log")"
		((SECONDS < end)) || fail 3 "$role stand-in did not start within 15s"
		sleep 0.05
	done
	STANDIN_PORT=$(<"$port_file")
}

log "Pathways service job $SERVICE_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $(hostname -s)"
log "instance type $INSTANCE_TYPE, slices min $MIN_SLICES max $MAX_SLICES, scratch $SCRATCH"

start_standin resource_manager "$RM_PORT" "pathways-sandbox resource_manager job=$SERVICE_JOB_ID port="
RM_PORT=$STANDIN_PORT
RM_ADDRESS=$BIND_HOST:$RM_PORT
log "resource manager: /pathways/server --server_port=$RM_PORT --node_type=resource_manager" \
	"--instance_type=$INSTANCE_TYPE --instance_count=$MAX_SLICES --gcs_scratch_location=$SCRATCH" \
	"--enable_gcs_olm=false"

start_standin proxy_server "$PROXY_PORT" "pathways-sandbox proxy_server job=$SERVICE_JOB_ID rm=$RM_ADDRESS port="
PROXY_PORT=$STANDIN_PORT
PROXY_ADDRESS=grpc://$BIND_HOST:$PROXY_PORT
log "IFRT proxy: /pathways/proxy_server --server_port=$PROXY_PORT --resource_manager_address=$RM_ADDRESS" \
	"--gcs_scratch_location=$SCRATCH --num_elastic_instances=$MAX_SLICES"

# ----------------------------------------------------------------------------- worker array
ARRAY_NAME=pathways-workers-$SERVICE_JOB_ID
ME=$(id -un)
mkdir -p -- "$LOG_DIR"

# After a requeue of this service job, adopt the array a previous run left behind.
existing=""
((AS_PUBLISHED)) ||
	existing=$(squeue -h -u "$ME" -n "$ARRAY_NAME" -o '%F' 2>/dev/null | sort -u | head -n 1 || true)
if [[ $existing =~ ^[0-9]+$ ]]; then
	ARRAY_JOB_ID=$existing
	log "adopting existing worker array $ARRAY_JOB_ID ($ARRAY_NAME)"
else
	export PATHWAYS_SERVICE_JOB_ID=$SERVICE_JOB_ID
	export PATHWAYS_RESOURCE_MANAGER_ADDRESS=$RM_ADDRESS
	export PATHWAYS_PROXY_ADDRESS=$PROXY_ADDRESS
	export PATHWAYS_INSTANCE_TYPE=$INSTANCE_TYPE
	export PATHWAYS_SLICE_SHAPE=$SLICE_SHAPE
	export PATHWAYS_GCS_SCRATCH_LOCATION=$SCRATCH
	export PATHWAYS_MAX_SLICES=$MAX_SLICES
	# As published, nothing the array carries names this job (its output file neither): %A is the
	# array's own id.
	worker_output=$LOG_DIR/${ARRAY_NAME}_%a.out
	((AS_PUBLISHED)) && worker_output=$LOG_DIR/run_worker_slice-%A_%a.out
	sbatch_args=(--parsable --array="0-$((MAX_SLICES - 1))" --ntasks=1 --cpus-per-task=1 --requeue
		--open-mode=append --output="$worker_output" --chdir="$LOG_DIR")
	((AS_PUBLISHED)) || sbatch_args+=(--job-name="$ARRAY_NAME" --comment="pathways-service=$SERVICE_JOB_ID")
	[[ -n $WORKER_PARTITION ]] && sbatch_args+=(--partition="$WORKER_PARTITION")
	for attempt in 1 2 3; do
		if out=$(sbatch "${sbatch_args[@]}" "$WORKER_SCRIPT" 2>&1); then
			ARRAY_JOB_ID=${out%%;*}
			break
		fi
		log "sbatch of the worker array failed (attempt $attempt): $out"
		sleep "$attempt"
	done
	[[ $ARRAY_JOB_ID =~ ^[0-9]+$ ]] || {
		ARRAY_JOB_ID=""
		fail 4 "could not submit the worker array"
	}
	log "submitted worker array $ARRAY_JOB_ID ($ARRAY_NAME, $MAX_SLICES tasks) running $WORKER_SCRIPT"
fi
# This job's own comment is left as submitted (nothing published says the service rewrites it;
# the submitter's marks stay on it).
log "worker array job id: $ARRAY_JOB_ID"

# ----------------------------------------------------------------------------- cluster.env
write_cluster_env() {
	local dir tmp
	dir=$(dirname -- "$CLUSTER_ENV")
	mkdir -p -- "$dir"
	tmp=$(mktemp "$dir/.cluster.env.XXXXXX")
	if ((AS_PUBLISHED)); then
		printf 'JAX_BACKEND_TARGET=%s\n' "$PROXY_ADDRESS" >"$tmp"
	else
		cat >"$tmp" <<EOF
# Written by start_pathways.sh (Pathways service job $SERVICE_JOB_ID) at $(date -u +%Y-%m-%dT%H:%M:%SZ)
PATHWAYS_PROXY_ADDRESS=$PROXY_ADDRESS
JAX_BACKEND_TARGET=$PROXY_ADDRESS
JAX_PLATFORMS=proxy
PATHWAYS_PROXY_HOST=$BIND_HOST
PATHWAYS_PROXY_PORT=$PROXY_PORT
PATHWAYS_RESOURCE_MANAGER_ADDRESS=$RM_ADDRESS
PATHWAYS_SERVICE_JOB_ID=$SERVICE_JOB_ID
PATHWAYS_WORKER_ARRAY_JOB_ID=$ARRAY_JOB_ID
PATHWAYS_INSTANCE_TYPE=$INSTANCE_TYPE
PATHWAYS_SLICE_SHAPE=$SLICE_SHAPE
PATHWAYS_MIN_SLICES=$MIN_SLICES
PATHWAYS_MAX_SLICES=$MAX_SLICES
PATHWAYS_GCS_SCRATCH_LOCATION=$SCRATCH
EOF
	fi
	chmod 0644 "$tmp"
	mv -f -- "$tmp" "$CLUSTER_ENV"
}

# ----------------------------------------------------------------------------- watch loop
written_address=""
declare -A HELD_SINCE=()
last_running=-1
empty_polls=0
while :; do
	if tasks=$(squeue -h -r -j "$ARRAY_JOB_ID" -o '%i %T %r' 2>/dev/null); then
		running=0
		active=0
		while read -r task st reason; do
			[[ -n $st ]] || continue
			active=$((active + 1))
			[[ $st == RUNNING ]] && running=$((running + 1))
			if [[ $RELEASE_REQUEUED == 1 && $st == PENDING && $reason == BeginTime ]]; then
				# Not in the second of the requeue: slurmd would reject the new run's credential
				# ("Job credential revoked"). Waiting 2 counts of $SECONDS guarantees >= 1 s.
				if [[ -z ${HELD_SINCE[$task]:-} ]]; then
					HELD_SINCE[$task]=$SECONDS
				elif ((SECONDS - HELD_SINCE[$task] >= 2)); then
					log "releasing requeued slice $task (scontrol update jobid=$task starttime=now)"
					scontrol update jobid="$task" starttime=now 2>/dev/null || log "could not release $task"
					unset "HELD_SINCE[$task]"
				fi
			fi
		done <<<"$tasks"
		if ((active == 0)); then
			empty_polls=$((empty_polls + 1))
			if ((empty_polls >= 3)); then
				ARRAY_JOB_ID_GONE=$ARRAY_JOB_ID
				ARRAY_JOB_ID=""
				fail 5 "worker array $ARRAY_JOB_ID_GONE has no pending or running tasks left"
			fi
		else
			empty_polls=0
		fi
		if ((running != last_running)); then
			log "slices running: $running/$MAX_SLICES (min $MIN_SLICES)"
			if ((running >= MIN_SLICES)); then
				log "Sufficient slices active: $running >= $MIN_SLICES"
			elif ((last_running >= MIN_SLICES)); then
				log "Insufficient slices active: $running < $MIN_SLICES (proxy keeps running)"
			fi
			last_running=$running
		fi
		if ((running >= MIN_SLICES)) && [[ $written_address != "$PROXY_ADDRESS" ]]; then
			write_cluster_env
			written_address=$PROXY_ADDRESS
			log "Pathways cluster ready: wrote $CLUSTER_ENV (PATHWAYS_PROXY_ADDRESS=$PROXY_ADDRESS)"
		fi
	else
		log "squeue failed; retrying"
	fi
	for pid in "${CHILD_PIDS[@]}"; do
		kill -0 "$pid" 2>/dev/null || fail 3 "a stand-in server (pid $pid) died"
	done
	sleep "$POLL" &
	wait $! || true
done

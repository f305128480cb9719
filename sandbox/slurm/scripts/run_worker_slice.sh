#!/bin/bash
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --requeue
#SBATCH --open-mode=append
#
# Sandbox stand-in for one TPU slice of the Pathways worker array: one array task = one slice.
# No --job-name here: submitted without one, the array is named after this file, as sbatch does.
# start_pathways.sh submits it with PATHWAYS_* variables exported. It prints the MEGASCALE_*
# variables a real worker would get and stays up until it is cancelled or requeued.
set -euo pipefail

log() { printf '%s [pathways-worker] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"; }

SLICE_ID=${SLURM_ARRAY_TASK_ID:-0}
NUM_SLICES=${PATHWAYS_MAX_SLICES:-${SLURM_ARRAY_TASK_COUNT:-1}}
RM_ADDRESS=${PATHWAYS_RESOURCE_MANAGER_ADDRESS:-127.0.0.1:29001}
SCRATCH=${PATHWAYS_GCS_SCRATCH_LOCATION:-}
[[ $SLICE_ID =~ ^[0-9]+$ ]] || {
	log "ERROR: bad SLURM_ARRAY_TASK_ID '$SLICE_ID'"
	exit 2
}

export MEGASCALE_NUM_SLICES=$NUM_SLICES
export MEGASCALE_SLICE_ID=$SLICE_ID
export MEGASCALE_COORDINATOR_ADDRESS=${RM_ADDRESS%:*}
export MEGASCALE_PORT=${MEGASCALE_PORT:-8080}
export TPU_TOPOLOGY=${PATHWAYS_SLICE_SHAPE:-}

log "=== slice $SLICE_ID start: job ${SLURM_JOB_ID:-?} (array ${SLURM_ARRAY_JOB_ID:-?}_${SLICE_ID})" \
	"restart ${SLURM_RESTART_COUNT:-0} on $(hostname -s)"
log "service job ${PATHWAYS_SERVICE_JOB_ID:-?}, instance type ${PATHWAYS_INSTANCE_TYPE:-?}"
printf 'MEGASCALE_NUM_SLICES=%s\n' "$MEGASCALE_NUM_SLICES"
printf 'MEGASCALE_SLICE_ID=%s\n' "$MEGASCALE_SLICE_ID"
printf 'MEGASCALE_COORDINATOR_ADDRESS=%s\n' "$MEGASCALE_COORDINATOR_ADDRESS"
printf 'MEGASCALE_PORT=%s\n' "$MEGASCALE_PORT"
printf 'TPU_TOPOLOGY=%s\n' "$TPU_TOPOLOGY"
log "worker: /pathways/server --server_port=29001 --resource_manager_address=$RM_ADDRESS" \
	"--gcs_scratch_location=$SCRATCH --enable_gcs_olm=false"

trap 'log "slice $SLICE_ID: SIGTERM, stopping"; exit 143' TERM
trap 'log "slice $SLICE_ID: SIGINT, stopping"; exit 130' INT
log "slice $SLICE_ID ready"
while :; do
	sleep 3600 &
	wait $! || true
done

#!/bin/bash
#SBATCH --job-name=pathways-workload
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --open-mode=append
#
# Sample Pathways workload (stand-in for run_maxtext.sh): reads the proxy address from
# cluster.env, checks the proxy answers, prints progress lines and exits with
# WORKLOAD_EXIT_CODE.
#
#   PATHWAYS_CLUSTER_ENV          file to read (default $HOME/pathways/cluster.env)
#   PATHWAYS_PROXY_KEY            key holding the address (default PATHWAYS_PROXY_ADDRESS);
#                                 the value may be grpc://host:port or host:port
#   PATHWAYS_CLUSTER_ENV_TIMEOUT  seconds to wait for the file (default 60)
#   PATHWAYS_REQUIRE_PROXY        1: exit 4 if the proxy does not answer (default 0: warn)
#   WORKLOAD_STEPS                progress lines to print (default 5)
#   WORKLOAD_STEP_SECONDS         pause between steps (default 1)
#   WORKLOAD_EXIT_CODE            exit code (default 0)
# Other exit codes: 2 bad input, 3 no cluster.env / key, 4 proxy unreachable (if required).
set -euo pipefail

log() { printf '%s [pathways-workload] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"; }
fail() {
	local code=$1
	shift
	log "ERROR: $*" >&2
	exit "$code"
}

: "${HOME:=$(getent passwd "$(id -un)" | cut -d: -f6)}"
ENV_FILE=${PATHWAYS_CLUSTER_ENV:-$HOME/pathways/cluster.env}
KEY=${PATHWAYS_PROXY_KEY:-PATHWAYS_PROXY_ADDRESS}
TIMEOUT=${PATHWAYS_CLUSTER_ENV_TIMEOUT:-60}
REQUIRE_PROXY=${PATHWAYS_REQUIRE_PROXY:-0}
STEPS=${WORKLOAD_STEPS:-5}
STEP_SECONDS=${WORKLOAD_STEP_SECONDS:-1}
EXIT_CODE=${WORKLOAD_EXIT_CODE:-0}

[[ $KEY =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || fail 2 "PATHWAYS_PROXY_KEY must be a variable name, got '$KEY'"
[[ $TIMEOUT =~ ^[0-9]+$ ]] || fail 2 "PATHWAYS_CLUSTER_ENV_TIMEOUT must be an integer, got '$TIMEOUT'"
[[ $STEPS =~ ^[0-9]+$ ]] || fail 2 "WORKLOAD_STEPS must be an integer, got '$STEPS'"
[[ $STEP_SECONDS =~ ^[0-9]+(\.[0-9]+)?$ ]] || fail 2 "WORKLOAD_STEP_SECONDS must be a number, got '$STEP_SECONDS'"
[[ $EXIT_CODE =~ ^[0-9]{1,3}$ ]] && ((10#$EXIT_CODE <= 255)) ||
	fail 2 "WORKLOAD_EXIT_CODE must be 0-255, got '$EXIT_CODE'"
EXIT_CODE=$((10#$EXIT_CODE))

log "workload ${SLURM_JOB_ID:+job $SLURM_JOB_ID }reading $ENV_FILE"
end=$((SECONDS + TIMEOUT))
until [[ -r $ENV_FILE ]]; do
	((SECONDS < end)) || fail 3 "$ENV_FILE did not appear within ${TIMEOUT}s"
	sleep 0.5
done

# Parse KEY=VALUE lines without executing anything (no 'source').
value=""
found=0
while IFS= read -r line || [[ -n $line ]]; do
	line=${line%$'\r'}
	[[ $line =~ ^[[:space:]]*(#|$) ]] && continue
	line=${line#export }
	if [[ ${line%%=*} == "$KEY" && $line == *=* ]]; then
		value=${line#*=}
		found=1
	fi
done <"$ENV_FILE"
((found)) || fail 3 "$KEY not found in $ENV_FILE"
# Strip one level of matching quotes.
if [[ $value =~ ^\"(.*)\"$ || $value =~ ^\'(.*)\'$ ]]; then value=${BASH_REMATCH[1]}; fi

hostport=${value#grpc://}
host=${hostport%:*}
port=${hostport##*:}
[[ $hostport == *:* && -n $host && $port =~ ^[0-9]{1,5}$ ]] || fail 3 "$KEY is not grpc://host:port or host:port: '$value'"
export JAX_PLATFORMS=proxy
export JAX_BACKEND_TARGET=grpc://$hostport
log "Pathways proxy address: $value"
log "JAX_PLATFORMS=$JAX_PLATFORMS JAX_BACKEND_TARGET=$JAX_BACKEND_TARGET"

if banner=$(timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2" && IFS= read -r -t 4 line <&3 && printf "%s" "$line"' \
	_ "$host" "$port" 2>/dev/null); then
	log "proxy answered: $banner"
elif [[ $REQUIRE_PROXY == 1 ]]; then
	fail 4 "proxy $hostport does not answer"
else
	log "WARNING: proxy $hostport does not answer"
fi

for ((step = 1; step <= STEPS; step++)); do
	log "step $step/$STEPS loss=$(printf '%d.%03d' $((10 / step)) $((1000 * step % 997)))"
	((step == STEPS)) || sleep "$STEP_SECONDS"
done
if ((EXIT_CODE == 0)); then
	log "workload finished"
else
	log "workload failed with exit code $EXIT_CODE"
fi
exit "$EXIT_CODE"

#!/usr/bin/env bash
# Stop the local Slurm sandbox started by up.sh: cancels all jobs, then stops slurmrestd, sshd,
# slurmd (both nodes), slurmctld, and munged if a sandbox started it. State stays in place unless
# --purge is given, which also deletes the state dir. Users (pathways, slurmrest) and packages stay.
#
# There is one host sandbox per machine: a sandbox that runs from another state dir (another
# checkout, maybe deleted since) is stopped too, with its job steps and jobs (lib.sh,
# sandbox_host_processes). The clusters of further Slurm versions (versions.sh) are stopped too,
# unless --host-only is given; their chroots stay.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

purge=0
versions=1
for arg in "$@"; do
	case $arg in
	--purge) purge=1 ;;
	--host-only) versions=0 ;;
	*) die "usage: down.sh [--purge] [--host-only]" ;;
	esac
done
[[ $(id -u) -eq 0 ]] || die "down.sh must run as root"
sandbox_check_settings
sandbox_resolve_state_dir
sandbox_paths

# Not while up.sh starts it (it holds this lock until the cluster is ready).
mkdir -p -- "$SANDBOX_RUN_DIR"
exec 9>"$SANDBOX_RUN_DIR/slurm-22.05.lock"
flock -w 300 9 || die "up.sh holds $SANDBOX_RUN_DIR/slurm-22.05.lock"

while read -r dir; do
	[[ -n $(sandbox_host_processes "$dir") ]] || continue
	# Cancel its jobs first while its slurmctld answers (their steps then end by themselves).
	if [[ -r $dir/etc/slurm.conf ]] && SLURM_CONF=$dir/etc/slurm.conf scontrol ping 2>/dev/null | grep -q 'is UP'; then
		export SLURM_CONF=$dir/etc/slurm.conf
		sandbox_cancel_all_jobs "cancelling all jobs of the sandbox in $dir"
		if [[ -n $(squeue -h -t RUNNING,COMPLETING,SUSPENDED -o %i 2>/dev/null) ]]; then
			end=$((SECONDS + 20))
			while [[ -n $(squeue -h -t RUNNING,COMPLETING,SUSPENDED -o %i 2>/dev/null) ]]; do
				((SECONDS < end)) || {
					log "jobs still running after 20s; stopping daemons anyway"
					break
				}
				sleep 0.2
			done
		fi
		export SLURM_CONF=$SLURM_CONF_FILE
	fi
	sandbox_stop_host "$dir"
done < <(sandbox_host_state_dirs)

# munged, if a sandbox started it (the marker is machine-wide; older up.sh wrote it into the state dir).
for marker in "$SANDBOX_MUNGE_MARKER" "$MUNGE_MARKER"; do
	[[ -r $marker ]] || continue
	if pid=$(pid_of /run/munge/munged.pid munged) && [[ $pid == "$(tr -dc '0-9' <"$marker")" ]]; then
		log "stopping munged (pid $pid)"
		stop_pid "$pid" munged
	fi
	rm -f -- "$marker"
done

# Forget state dirs whose sandbox no longer runs and that are gone.
sandbox_prune_host_states
exec 9>&-

# The chroot clusters of other Slurm versions (versions.sh): stopped, unmounted (state kept
# unless --purge). Their chroots stay under $SLURM_SANDBOX_CHROOT_BASE for the next run.
if ((versions)); then
	for version in "${SLURM_SANDBOX_CHROOT_VERSIONS[@]}"; do
		if [[ -d $SLURM_SANDBOX_CHROOT_BASE/$version/root ]]; then
			args=(down "$version")
			((purge)) && args+=(--purge)
			bash "$SANDBOX_SLURM_DIR/versions.sh" "${args[@]}" || log "stopping the Slurm $version cluster failed"
		fi
	done
fi

if ((purge)); then
	if [[ -L $SLURM_SANDBOX_ETC_SLURM_CONF && $(readlink -- "$SLURM_SANDBOX_ETC_SLURM_CONF") == "$SLURM_CONF_FILE" ]]; then
		rm -f -- "$SLURM_SANDBOX_ETC_SLURM_CONF"
	fi
	[[ -e $STATE/$SLURM_SANDBOX_MARKER ]] || die "$STATE has no $SLURM_SANDBOX_MARKER; not deleting it"
	log "deleting $STATE"
	rm -rf -- "$STATE"
fi
log "stopped"

#!/usr/bin/env bash
# Stop the local Slurm sandbox started by up.sh: cancels all jobs, then stops slurmrestd, sshd,
# slurmd, slurmctld (and munged if up.sh started it). State stays in place unless --purge is
# given, which also deletes the state dir. Users (pathways, slurmrest) and packages stay.
# The clusters of further Slurm versions (versions.sh) are stopped too; their chroots stay.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

purge=0
case ${1:-} in
"") ;;
--purge) purge=1 ;;
*) die "usage: down.sh [--purge]" ;;
esac
[[ $(id -u) -eq 0 ]] || die "down.sh must run as root"
sandbox_check_settings
sandbox_resolve_state_dir
sandbox_paths

if pid_of "$CTLD_PID" slurmctld >/dev/null && scontrol ping 2>/dev/null | grep -q 'is UP'; then
	partitions=$SLURM_SANDBOX_PARTITION_DEFAULT,$SLURM_SANDBOX_PARTITION_PREEMPTIBLE,$SLURM_SANDBOX_PARTITION_HIGH
	if [[ -n $(squeue -h -p "$partitions" -o %i 2>/dev/null) ]]; then
		log "cancelling all jobs"
		scancel -p "$partitions" 2>/dev/null || true
		end=$((SECONDS + 20))
		while [[ -n $(squeue -h -p "$partitions" -t RUNNING,COMPLETING,SUSPENDED -o %i 2>/dev/null) ]]; do
			((SECONDS < end)) || {
				log "jobs still running after 20s; stopping daemons anyway"
				break
			}
			sleep 0.2
		done
	fi
fi

sandbox_stop_daemons "$STATE"

if [[ -r $MUNGE_MARKER ]]; then
	if pid=$(pid_of /run/munge/munged.pid munged) && [[ $pid == "$(tr -dc '0-9' <"$MUNGE_MARKER")" ]]; then
		log "stopping munged (pid $pid)"
		stop_pid "$pid" munged
	fi
	rm -f -- "$MUNGE_MARKER"
fi

# The chroot clusters of other Slurm versions (versions.sh): stopped, unmounted (state kept
# unless --purge). Their chroots stay under $SLURM_SANDBOX_CHROOT_BASE for the next run.
for version in "${SLURM_SANDBOX_CHROOT_VERSIONS[@]}"; do
	if [[ -d $SLURM_SANDBOX_CHROOT_BASE/$version/root ]]; then
		args=(down "$version")
		((purge)) && args+=(--purge)
		bash "$SANDBOX_SLURM_DIR/versions.sh" "${args[@]}" || log "stopping the Slurm $version cluster failed"
	fi
done

if ((purge)); then
	if [[ -L $SLURM_SANDBOX_ETC_SLURM_CONF && $(readlink -- "$SLURM_SANDBOX_ETC_SLURM_CONF") == "$SLURM_CONF_FILE" ]]; then
		rm -f -- "$SLURM_SANDBOX_ETC_SLURM_CONF"
	fi
	[[ -e $STATE/$SLURM_SANDBOX_MARKER ]] || die "$STATE has no $SLURM_SANDBOX_MARKER; not deleting it"
	log "deleting $STATE"
	rm -rf -- "$STATE"
fi
log "stopped"

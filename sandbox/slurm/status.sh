#!/usr/bin/env bash
# What of the Slurm sandbox runs on this machine, whoever started it: one line per running cluster,
#
#   22.05 STATE_DIR NAME=PID...    the host's cluster (up.sh), from whichever state dir it runs
#   24.11 CHROOT NAME=PID...       a chroot cluster (versions.sh): every process inside the chroot
#
# and nothing for a cluster that does not run (sandbox.session reads this). Needs root.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) -eq 0 ]] || die "status.sh must run as root"
if [[ -d ${SANDBOX_STATE_DIR:-$SANDBOX_REPO_ROOT/.sandbox/slurm} ]]; then
	STATE=$(cd -- "${SANDBOX_STATE_DIR:-$SANDBOX_REPO_ROOT/.sandbox/slurm}" && pwd -P)
fi
while read -r dir; do
	line=""
	while read -r name pid; do
		line+=" $name=$pid"
	done < <(sandbox_host_processes "$dir")
	[[ -n $line ]] && printf '22.05 %s%s\n' "$dir" "$line"
done < <(sandbox_host_state_dirs)
for version in "${SLURM_SANDBOX_CHROOT_VERSIONS[@]}"; do
	root=$SLURM_SANDBOX_CHROOT_BASE/$version/root
	[[ -d $root ]] || continue
	line=""
	for link in /proc/[0-9]*/root; do
		if [[ $(readlink "$link" 2>/dev/null) == "$root" ]]; then
			pid=${link#/proc/}
			pid=${pid%/root}
			line+=" $(cat "/proc/$pid/comm" 2>/dev/null || echo '?')=$pid"
		fi
	done
	[[ -n $line ]] && printf '%s %s%s\n' "$version" "$root" "$line"
done
exit 0

#!/usr/bin/env bash
# Build the Debian chroot of one further Slurm version (see versions.sh): debootstrap
# --variant=minbase with the Slurm daemons, munge, the JWT plugin, sshd and python3 (plus slurmdbd and
# MariaDB where that cluster keeps accounting), from the Debian mirror apt already uses.
#
#   build-chroot.sh VERSION        build unless a chroot made by this very script exists
#
# A chroot is built once per machine under $SANDBOX_CHROOT_DIR (default /var/lib/pathways-slurm-sandbox)
# and rebuilt only when it is missing or this script changed. Needs root on Debian.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) -eq 0 ]] || die "build-chroot.sh must run as root"
[[ $# -eq 1 ]] || die "usage: build-chroot.sh VERSION"
version=$1
sandbox_version_settings "$version"

base=$SLURM_SANDBOX_CHROOT_BASE/$version
stamp_file=$base/built
stamp="$(sha256sum <"${BASH_SOURCE[0]}" | cut -d' ' -f1) $version $V_SUITE"
mkdir -p -- "$base"
exec 8>"$base/.build.lock"
flock -w 900 8 || die "another build of $base is still running"

if [[ -d $V_ROOT && -r $stamp_file && $(cat "$stamp_file") == "$stamp" ]]; then
	exit 0
fi

# Nothing may run in (or be mounted into) a chroot that is about to be replaced.
sandbox_chroot_busy "$V_ROOT" && die "$V_ROOT is in use (daemons or mounts): run versions.sh down $version first"

packages=(slurmctld slurmd slurmrestd slurm-client munge slurm-wlm-jwt-plugin openssh-server python3)
((V_ACCOUNTING)) && packages+=(slurmdbd mariadb-server)

command -v debootstrap >/dev/null || bash "$SANDBOX_REPO_ROOT/sandbox/packages.sh" chroot ||
	die "cannot install debootstrap"
script=$V_SCRIPT
[[ -r /usr/share/debootstrap/scripts/$script ]] && script=/usr/share/debootstrap/scripts/$script
mirror=$(sandbox_debian_mirror)

new=$base/root.new
log_file=$base/build.log
[[ -e $new ]] && rm -rf --one-file-system -- "$new"
log "building the Slurm $version chroot ($V_SUITE from $mirror) in $V_ROOT; log: $log_file"
started=$SECONDS
if ! debootstrap --variant=minbase --include="$(
	IFS=,
	echo "${packages[*]}"
)" "$V_SUITE" "$new" "$mirror" "$script" >"$log_file" 2>&1; then
	tail -n 20 "$log_file" >&2
	die "debootstrap of $V_SUITE failed (see $log_file)"
fi

# Never start services from package scripts inside the chroot; the sandbox starts them itself.
printf '#!/bin/sh\nexit 101\n' >"$new/usr/sbin/policy-rc.d"
chmod 0755 "$new/usr/sbin/policy-rc.d"
# slurmrestd refuses to run as root or as SlurmUser.
chroot "$new" useradd --system --user-group --no-create-home --home-dir /nonexistent \
	--shell /usr/sbin/nologin slurmrest
chroot "$new" apt-get clean
rm -rf -- "$new/var/lib/apt/lists/"*
printf '%s\n' "$version" >"$new/etc/pathways-sandbox-slurm-version"

if [[ -e $V_ROOT ]]; then
	rm -rf --one-file-system -- "$V_ROOT"
fi
mv -- "$new" "$V_ROOT"
printf '%s\n' "$stamp" >"$stamp_file"
log "built the Slurm $version chroot in $((SECONDS - started))s: $(chroot "$V_ROOT" dpkg-query -W -f='${Version}' slurmctld)"

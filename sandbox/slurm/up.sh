#!/usr/bin/env bash
# Start (or check) the local Slurm sandbox: munge, slurmctld, slurmd, slurmrestd (JWT) and a
# private sshd, all on 127.0.0.1, with state under $SANDBOX_STATE_DIR (default
# <repo>/.sandbox/slurm). Idempotent: healthy daemons are left alone, so a second run only
# checks readiness, resumes downed nodes, refreshes the JWT and rewrites slurm.env/slurm.json;
# a sandbox another checkout started that runs is shared, not restarted (see 0.).
#
# Needs root on Debian 12 (installs packages with apt-get). See README.md.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) -eq 0 ]] || die "up.sh must run as root"
sandbox_check_settings
sandbox_resolve_state_dir
sandbox_cluster_user
sandbox_paths
umask 022

mkdir -p -- "$ETC" "$RUN" "$LOGS" "$SPOOL/slurmctld" "$SPOOL/slurmd-$NODE_NAME" "$SPOOL/slurmd-$ISOLATED_NODE" \
	"$SSHDIR" "$AUTH_KEYS_DIR" "$JWTDIR"
chmod 0700 "$JWTDIR"
touch -- "$STATE/$SLURM_SANDBOX_MARKER"

# One up.sh at a time on this machine (other developers, other checkouts may run it concurrently;
# there is one host sandbox per machine). Daemons are started with 9>&- so that they do not inherit
# (and hold) the lock.
mkdir -p -- "$SANDBOX_RUN_DIR"
exec 9>"$SANDBOX_RUN_DIR/slurm-22.05.lock"
flock -w 300 9 || die "another up.sh holds $SANDBOX_RUN_DIR/slurm-22.05.lock"

STARTED=$SECONDS
deadline() { echo $((SECONDS + SLURM_SANDBOX_TIMEOUT)); }

# ---------------------------------------------------------------------------------------------
# 0. Only one sandbox per machine (fixed ports). One that runs from another checkout's state dir is
#    shared: this run checks and uses it as this checkout's cluster user (sandbox_cluster_user), with
#    its settings written into this state dir (OWN_STATE), since a test session of that checkout may
#    be using it. One whose state dir is gone (a deleted checkout) or never got ready is found by its
#    processes, whether or not its pid files still exist, and stopped with SANDBOX_SLURM_TAKEOVER=1
#    (sandbox_host_processes says what belongs to it).
# ---------------------------------------------------------------------------------------------
while read -r other_state; do
	[[ $other_state == "$STATE" ]] && continue
	if [[ -n $(sandbox_host_processes "$other_state") ]]; then
		if [[ -s $other_state/slurm.json && -e $other_state/$SLURM_SANDBOX_MARKER ]]; then
			log "using the cluster another checkout started from $other_state, as $SLURM_SANDBOX_USER"
			STATE=$other_state
			sandbox_paths
			break
		fi
		gone=""
		[[ -d $other_state ]] || gone=" (that directory is gone)"
		[[ ${SANDBOX_SLURM_TAKEOVER:-0} == 1 ]] ||
			die "a Slurm sandbox from $other_state$gone is running; run its down.sh or set SANDBOX_SLURM_TAKEOVER=1"
		log "taking over from the sandbox in $other_state$gone"
		sandbox_stop_host "$other_state"
	fi
done < <(sandbox_host_state_dirs)
sandbox_prune_host_states
sandbox_record_host_state "$STATE"

# ---------------------------------------------------------------------------------------------
# 1. Packages
# ---------------------------------------------------------------------------------------------
bash "$SANDBOX_REPO_ROOT/sandbox/packages.sh" slurm || die "installing the Slurm packages failed"
PYTHON=/usr/bin/python3

# ---------------------------------------------------------------------------------------------
# 2. Users: a system user for slurmrestd (it refuses root) and this checkout's cluster user.
# ---------------------------------------------------------------------------------------------
if ! id -u "$SLURM_SANDBOX_REST_SYSUSER" >/dev/null 2>&1; then
	useradd --system --user-group --no-create-home --home-dir /nonexistent \
		--shell /usr/sbin/nologin "$SLURM_SANDBOX_REST_SYSUSER"
fi
mkdir -p -- "$(dirname -- "$USER_HOME")"
if ! id -u "$SLURM_SANDBOX_USER" >/dev/null 2>&1; then
	useradd --user-group --no-create-home --home-dir "$USER_HOME" --shell /bin/bash "$SLURM_SANDBOX_USER"
elif [[ $(getent passwd "$SLURM_SANDBOX_USER" | cut -d: -f6) != "$USER_HOME" ]]; then
	# A user named by SANDBOX_SLURM_USER that another state dir had: it belongs to the sandbox, and
	# jobs left by the sandbox it replaces must not block usermod.
	pkill -KILL -u "$SLURM_SANDBOX_USER" 2>/dev/null || true
	for _ in $(seq 50); do pgrep -u "$SLURM_SANDBOX_USER" >/dev/null || break; sleep 0.1; done
	usermod --home "$USER_HOME" "$SLURM_SANDBOX_USER"
fi
# useradd leaves the password locked ('!'); sshd with UsePAM=no then refuses even key logins.
if [[ $(getent shadow "$SLURM_SANDBOX_USER" | cut -d: -f2) == '!'* ]]; then
	usermod -p '*' "$SLURM_SANDBOX_USER"
fi
mkdir -p -- "$USER_HOME/pathways/logs" "$SCRIPTS_DIR"
chown "$SLURM_SANDBOX_USER:" "$USER_HOME" "$USER_HOME/pathways" "$USER_HOME/pathways/logs"
chmod 0755 "$USER_HOME" "$USER_HOME/pathways"
chown root:root "$SCRIPTS_DIR"
chmod 0755 "$SCRIPTS_DIR"
for script in start_pathways.sh run_worker_slice.sh run_workload.sh; do
	if ! cmp -s "$SANDBOX_SLURM_DIR/scripts/$script" "$SCRIPTS_DIR/$script"; then
		install -m 0755 -o root -g root "$SANDBOX_SLURM_DIR/scripts/$script" "$SCRIPTS_DIR/$script"
	fi
done

# The cluster user and the slurmrestd user must reach the state dir (slurm.conf, spool, home).
ensure_traversable "$SLURM_SANDBOX_USER" "$USER_HOME"
ensure_traversable "$SLURM_SANDBOX_REST_SYSUSER" "$ETC"
chmod 0755 "$STATE" "$ETC" "$RUN" "$LOGS" "$SPOOL" "$SPOOL/slurmd-$NODE_NAME" "$SPOOL/slurmd-$ISOLATED_NODE" \
	"$SSHDIR" "$AUTH_KEYS_DIR"
chmod 0700 "$JWTDIR" "$SPOOL/slurmctld"

# ---------------------------------------------------------------------------------------------
# 3. munge
# ---------------------------------------------------------------------------------------------
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_ok; then
	mkdir -p /run/munge /var/lib/munge /var/log/munge
	chown munge:munge /run/munge /var/lib/munge /var/log/munge
	chmod 0755 /run/munge
	if [[ ! -s /etc/munge/munge.key ]]; then
		log "creating /etc/munge/munge.key"
		mungekey --create --force --keyfile=/etc/munge/munge.key
	fi
	chown munge:munge /etc/munge/munge.key
	chmod 0600 /etc/munge/munge.key
	if pid=$(pid_of /run/munge/munged.pid munged); then
		log "munged (pid $pid) does not answer; restarting it"
		stop_pid "$pid" munged
	fi
	# Leftovers of a munged that is gone (machine reused, /run not cleared).
	rm -f /run/munge/munged.pid /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
	log "starting munged"
	runuser -u munge -- /usr/sbin/munged 9>&-
	end=$(deadline)
	until munge_ok; do
		((SECONDS < end)) || die "munged did not answer within ${SLURM_SANDBOX_TIMEOUT}s (see /var/log/munge/munged.log)"
		sleep 0.1
	done
	# Machine-wide: down.sh of any checkout stops the munged a sandbox started.
	mkdir -p -- "$SANDBOX_RUN_DIR"
	pid_of /run/munge/munged.pid munged >"$SANDBOX_MUNGE_MARKER" || true
elif [[ -r $MUNGE_MARKER && ! -e $SANDBOX_MUNGE_MARKER ]]; then
	# Where an older up.sh noted the munged it started.
	mv -f -- "$MUNGE_MARKER" "$SANDBOX_MUNGE_MARKER"
fi

# ---------------------------------------------------------------------------------------------
# 4. slurm.conf (+ JWT key), /etc/slurm/slurm.conf symlink
# ---------------------------------------------------------------------------------------------
if [[ ! -s $JWT_KEY ]]; then
	(umask 077 && head -c 32 /dev/urandom >"$JWT_KEY.tmp")
	mv -f -- "$JWT_KEY.tmp" "$JWT_KEY"
fi
chown root:root "$JWT_KEY"
chmod 0600 "$JWT_KEY"

sandbox_slurm_conf sandbox/slurm/up.sh "$SLURM_SANDBOX_CLUSTER_NAME" "$SLURM_SANDBOX_CTLD_PORT" \
	"$SLURM_SANDBOX_SLURMD_PORT" "$SLURM_SANDBOX_ISOLATED_SLURMD_PORT" 86400 \
	"JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none" >"$SLURM_CONF_FILE.new"
slurm_conf_changed=0
if cmp -s "$SLURM_CONF_FILE.new" "$SLURM_CONF_FILE"; then
	rm -f -- "$SLURM_CONF_FILE.new"
else
	chmod 0644 "$SLURM_CONF_FILE.new"
	mv -f -- "$SLURM_CONF_FILE.new" "$SLURM_CONF_FILE"
	slurm_conf_changed=1
fi

# Client commands (also inside jobs and SSH sessions) read /etc/slurm/slurm.conf by default.
mkdir -p /etc/slurm
etc_conf=$SLURM_SANDBOX_ETC_SLURM_CONF
if [[ -e $etc_conf && ! -L $etc_conf ]]; then
	log "moving the existing $etc_conf aside to $etc_conf.before-pathways-sandbox"
	mv -f -- "$etc_conf" "$etc_conf.before-pathways-sandbox"
fi
ln -sfn -- "$SLURM_CONF_FILE" "$etc_conf"

# ---------------------------------------------------------------------------------------------
# 5. slurmctld + slurmd
# ---------------------------------------------------------------------------------------------
require_free_port() {
	if port_open "$1"; then
		local holder
		holder=$(sandbox_port_holder "$1")
		die "port $1 ($2) is already taken by a process this sandbox did not start${holder:+ ($holder)}; free it or set $3"
	fi
}

ctld_ping() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

if pid=$(pid_of "$CTLD_PID" slurmctld) && ((slurm_conf_changed)); then
	log "slurm.conf changed: restarting slurmctld (pid $pid)"
	stop_pid "$pid" slurmctld
fi
if ! pid_of "$CTLD_PID" slurmctld >/dev/null; then
	# A stale pid file is dangerous: slurmctld signals the pid it finds there on start.
	rm -f -- "$CTLD_PID"
	require_free_port "$SLURM_SANDBOX_CTLD_PORT" slurmctld SANDBOX_SLURMCTLD_PORT
	log "starting slurmctld"
	slurmctld -f "$SLURM_CONF_FILE" -i 9>&-
fi
end=$(deadline)
until ctld_ping; do
	((SECONDS < end)) || die "slurmctld not UP within ${SLURM_SANDBOX_TIMEOUT}s (see $LOGS/slurmctld.log)"
	sleep 0.1
done

# One slurmd per node: NODE PID_FILE PORT PORT_SETTING.
SLURMDS=("$NODE_NAME $SLURMD_PID $SLURM_SANDBOX_SLURMD_PORT SANDBOX_SLURMD_PORT"
	"$ISOLATED_NODE $ISOLATED_SLURMD_PID $SLURM_SANDBOX_ISOLATED_SLURMD_PORT SANDBOX_ISOLATED_SLURMD_PORT")
if ((slurm_conf_changed)); then
	# The slurmd of an older layout (one node, pid file slurmd.pid).
	if pid=$(pid_of "$LEGACY_SLURMD_PID" slurmd); then
		log "slurm.conf changed: stopping slurmd (pid $pid)"
		stop_pid "$pid" slurmd
	fi
	rm -f -- "$LEGACY_SLURMD_PID"
	for entry in "${SLURMDS[@]}"; do
		read -r node pid_file _ _ <<<"$entry"
		if pid=$(pid_of "$pid_file" slurmd); then
			log "slurm.conf changed: restarting slurmd of $node (pid $pid)"
			stop_pid "$pid" slurmd
		fi
	done
fi
start_slurmd() {
	local node=$1 pid_file=$2 port=$3 setting=$4
	rm -f -- "$pid_file"
	require_free_port "$port" "slurmd of $node" "$setting"
	log "starting slurmd of $node"
	slurmd -f "$SLURM_CONF_FILE" -N "$node" 9>&-
}
for entry in "${SLURMDS[@]}"; do
	read -r node pid_file port setting <<<"$entry"
	pid_of "$pid_file" slurmd >/dev/null || start_slurmd "$node" "$pid_file" "$port" "$setting"
done

# Wait for the nodes to be usable; resume one that a test (or a crash) left down or drained.
end=$(deadline)
declare -A last_resume=()
for entry in "${SLURMDS[@]}"; do
	read -r node pid_file port setting <<<"$entry"
	last_resume[$node]=-100
	while :; do
		state=$(sinfo -h -N -n "$node" -o '%T' 2>/dev/null | head -n 1 || true)
		case $state in
		idle | mixed | allocated | completing) break ;;
		down | drain* | fail*)
			if ((SECONDS - last_resume[$node] >= 5)); then
				log "node $node is $state: scontrol update nodename=$node state=resume"
				scontrol update nodename="$node" state=resume || true
				last_resume[$node]=$SECONDS
			fi
			;;
		esac
		# slurmd writes its pid file a moment after it daemonized; a dead one is started again.
		if ! pid_of "$pid_file" slurmd >/dev/null && ! port_open "$port"; then
			start_slurmd "$node" "$pid_file" "$port" "$setting"
		fi
		((SECONDS < end)) || die "node $node not ready within ${SLURM_SANDBOX_TIMEOUT}s (state '$state'; see $LOGS/slurmd-$node.log)"
		sleep 0.2
	done
done

# ---------------------------------------------------------------------------------------------
# 6. JWT token for the cluster user (fresh on every run; old tokens stay valid until expiry)
# ---------------------------------------------------------------------------------------------
token_out=$(scontrol token lifespan="$SLURM_SANDBOX_JWT_LIFESPAN" username="$SLURM_SANDBOX_USER")
token=${token_out#SLURM_JWT=}
[[ $token =~ ^[A-Za-z0-9._-]+$ ]] || die "unexpected output from scontrol token: $token_out"
(umask 077 && printf '%s' "$token" >"$TOKEN_FILE.tmp")
mv -f -- "$TOKEN_FILE.tmp" "$TOKEN_FILE"
token_expires=$(($(date +%s) + SLURM_SANDBOX_JWT_LIFESPAN))

# ---------------------------------------------------------------------------------------------
# 7. slurmrestd (JWT auth, as a system user, on 127.0.0.1)
# ---------------------------------------------------------------------------------------------
REST_URL=http://$SLURM_SANDBOX_HOST:$SLURM_SANDBOX_REST_PORT
REST_ARGS=(-f "$SLURM_CONF_FILE" -a rest_auth/jwt -s "openapi/${SLURM_SANDBOX_REST_API_VERSIONS//,/,openapi/}"
	-u "$SLURM_SANDBOX_REST_SYSUSER" "$SLURM_SANDBOX_HOST:$SLURM_SANDBOX_REST_PORT")
rest_ok() {
	"$PYTHON" - "$REST_URL/slurm/$SLURM_SANDBOX_REST_API_VERSION/ping" "$SLURM_SANDBOX_USER" "$TOKEN_FILE" <<'PY' 2>/dev/null
import sys
import urllib.request

url, user, token_file = sys.argv[1:]
with open(token_file) as f:
    token = f.read().strip()
req = urllib.request.Request(url, headers={"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token})
with urllib.request.urlopen(req, timeout=3) as resp:
    sys.exit(0 if resp.status == 200 else 1)
PY
}
if pid=$(pid_of "$REST_PID" slurmrestd) && ((slurm_conf_changed)); then
	log "slurm.conf changed: restarting slurmrestd (pid $pid)"
	stop_pid "$pid" slurmrestd
fi
if ! pid_of "$REST_PID" slurmrestd >/dev/null; then
	rm -f -- "$REST_PID"
	require_free_port "$SLURM_SANDBOX_REST_PORT" slurmrestd SANDBOX_SLURMREST_PORT
	log "starting slurmrestd on $SLURM_SANDBOX_HOST:$SLURM_SANDBOX_REST_PORT"
	# The inner bash records its own pid, then becomes slurmrestd (same pid) in a new session.
	# SLURM_JWT=daemon makes slurmrestd talk to slurmctld with auth/jwt (else: auth/munge, which
	# rejects the per-request tokens with "Rejecting thread config token").
	SLURM_JWT=daemon setsid -f bash -c 'echo "$$" >"$1"; shift; exec "$@"' _ "$REST_PID" \
		/usr/sbin/slurmrestd "${REST_ARGS[@]}" </dev/null >>"$LOGS/slurmrestd.log" 2>&1 9>&-
fi
end=$(deadline)
until rest_ok; do
	((SECONDS < end)) || die "slurmrestd not answering within ${SLURM_SANDBOX_TIMEOUT}s (see $LOGS/slurmrestd.log)"
	sleep 0.2
done

# ---------------------------------------------------------------------------------------------
# 8. sshd on a private port with its own host key; client key pair and known_hosts
# ---------------------------------------------------------------------------------------------
[[ -s $HOST_KEY ]] || ssh-keygen -q -t ed25519 -N '' -C pathways-slurm-sandbox-host -f "$HOST_KEY"
[[ -s $CLIENT_KEY ]] || ssh-keygen -q -t ed25519 -N '' -C "$SLURM_SANDBOX_USER@pathways-slurm-sandbox" -f "$CLIENT_KEY"
# Each checkout's user logs in with its own key (AuthorizedKeysFile names the user).
chmod 0600 "$HOST_KEY" "$CLIENT_KEY"
install -m 0644 -o root -g root "$CLIENT_KEY.pub" "$AUTH_KEYS_DIR/$SLURM_SANDBOX_USER"
if ((SLURM_SANDBOX_SSH_PORT == 22)); then host_pattern=$SLURM_SANDBOX_HOST; else host_pattern="[$SLURM_SANDBOX_HOST]:$SLURM_SANDBOX_SSH_PORT"; fi
read -r key_type key_blob _ <"$HOST_KEY.pub"
printf '%s %s %s\n' "$host_pattern" "$key_type" "$key_blob" >"$KNOWN_HOSTS.tmp"
chmod 0644 "$KNOWN_HOSTS.tmp"
mv -f -- "$KNOWN_HOSTS.tmp" "$KNOWN_HOSTS"

cat >"$SSHD_CONFIG.new" <<EOF
# Generated by sandbox/slurm/up.sh -- do not edit (rewritten on every run).
Port $SLURM_SANDBOX_SSH_PORT
ListenAddress $SLURM_SANDBOX_HOST
AddressFamily inet
HostKey $HOST_KEY
PidFile $SSHD_PID
AuthorizedKeysFile $AUTH_KEYS_DIR/%u
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin no
AllowUsers $SLURM_SANDBOX_SSH_USERS
# The state dir may live under a group-writable checkout; keys are root-owned anyway.
StrictModes no
X11Forwarding no
AllowTcpForwarding yes
PrintMotd no
PrintLastLog no
MaxStartups 100:30:200
MaxSessions 50
SetEnv SLURM_CONF=$SLURM_CONF_FILE
Subsystem sftp internal-sftp
LogLevel INFO
EOF
sshd_changed=0
if cmp -s "$SSHD_CONFIG.new" "$SSHD_CONFIG"; then
	rm -f -- "$SSHD_CONFIG.new"
else
	mv -f -- "$SSHD_CONFIG.new" "$SSHD_CONFIG"
	sshd_changed=1
fi
ssh_banner_ok() {
	timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && IFS= read -r -t 2 line <&3 && [[ $line == SSH-2.0-* ]]' \
		_ "$SLURM_SANDBOX_SSH_PORT" 2>/dev/null
}
if pid=$(pid_of "$SSHD_PID" sshd "$SSHD_CONFIG") && ((sshd_changed)); then
	log "sshd_config changed: restarting sshd (pid $pid)"
	stop_pid "$pid" sshd
fi
if ! pid_of "$SSHD_PID" sshd "$SSHD_CONFIG" >/dev/null; then
	rm -f -- "$SSHD_PID"
	require_free_port "$SLURM_SANDBOX_SSH_PORT" sshd SANDBOX_SSH_PORT
	mkdir -p /run/sshd
	chmod 0755 /run/sshd
	/usr/sbin/sshd -t -f "$SSHD_CONFIG" || die "sshd rejects $SSHD_CONFIG"
	log "starting sshd on $SLURM_SANDBOX_HOST:$SLURM_SANDBOX_SSH_PORT"
	/usr/sbin/sshd -f "$SSHD_CONFIG" -E "$LOGS/sshd.log" 9>&-
fi
end=$(deadline)
until ssh_banner_ok; do
	((SECONDS < end)) || die "sshd not accepting within ${SLURM_SANDBOX_TIMEOUT}s (see $LOGS/sshd.log)"
	sleep 0.1
done

# ---------------------------------------------------------------------------------------------
# 9. slurm.env + slurm.json, in this checkout's state dir (the shared cluster's are its owner's)
# ---------------------------------------------------------------------------------------------
ENV_LINES=(
	"SLURM_SANDBOX_STATE_DIR=$STATE"
	"SLURM_CONF=$SLURM_CONF_FILE"
	"SLURM_SANDBOX_CLUSTER_NAME=$SLURM_SANDBOX_CLUSTER_NAME"
	"SLURM_SANDBOX_NODES=$NODE_NAME"
	"SLURM_SANDBOX_CPUS=$SLURM_SANDBOX_CPUS"
	"SLURM_SANDBOX_PARTITIONS=$SLURM_SANDBOX_PARTITION_DEFAULT,$SLURM_SANDBOX_PARTITION_PREEMPTIBLE,$SLURM_SANDBOX_PARTITION_HIGH"
	"SLURM_SANDBOX_DEFAULT_PARTITION=$SLURM_SANDBOX_PARTITION_DEFAULT"
	"SLURM_SANDBOX_PREEMPTIBLE_PARTITION=$SLURM_SANDBOX_PARTITION_PREEMPTIBLE"
	"SLURM_SANDBOX_HIGH_PARTITION=$SLURM_SANDBOX_PARTITION_HIGH"
	"SLURM_SANDBOX_ISOLATED_NODE=$ISOLATED_NODE"
	"SLURM_SANDBOX_ISOLATED_CPUS=$SLURM_SANDBOX_ISOLATED_CPUS"
	"SLURM_SANDBOX_ISOLATED_PARTITIONS=$SLURM_SANDBOX_PARTITION_ISOLATED,$SLURM_SANDBOX_PARTITION_ISOLATED_PREEMPTIBLE,$SLURM_SANDBOX_PARTITION_ISOLATED_HIGH"
	"SLURM_SANDBOX_ISOLATED_PARTITION=$SLURM_SANDBOX_PARTITION_ISOLATED"
	"SLURM_SANDBOX_ISOLATED_PREEMPTIBLE_PARTITION=$SLURM_SANDBOX_PARTITION_ISOLATED_PREEMPTIBLE"
	"SLURM_SANDBOX_ISOLATED_HIGH_PARTITION=$SLURM_SANDBOX_PARTITION_ISOLATED_HIGH"
	"SLURM_SANDBOX_REST_URL=$REST_URL"
	"SLURM_SANDBOX_REST_API_VERSION=$SLURM_SANDBOX_REST_API_VERSION"
	"SLURM_SANDBOX_REST_API_VERSIONS=$SLURM_SANDBOX_REST_API_VERSIONS"
	"SLURM_SANDBOX_USER=$SLURM_SANDBOX_USER"
	"SLURM_SANDBOX_USER_HOME=$USER_HOME"
	"SLURM_SANDBOX_JWT_TOKEN_FILE=$TOKEN_FILE"
	"SLURM_SANDBOX_JWT_EXPIRES=$token_expires"
	"SLURM_SANDBOX_SSH_HOST=$SLURM_SANDBOX_HOST"
	"SLURM_SANDBOX_SSH_PORT=$SLURM_SANDBOX_SSH_PORT"
	"SLURM_SANDBOX_SSH_PRIVATE_KEY=$CLIENT_KEY"
	"SLURM_SANDBOX_SSH_KNOWN_HOSTS=$KNOWN_HOSTS"
	"SLURM_SANDBOX_SCRIPTS_DIR=$SCRIPTS_DIR"
	"SLURM_SANDBOX_START_PATHWAYS_SCRIPT=$SCRIPTS_DIR/start_pathways.sh"
	"SLURM_SANDBOX_RUN_WORKER_SLICE_SCRIPT=$SCRIPTS_DIR/run_worker_slice.sh"
	"SLURM_SANDBOX_RUN_WORKLOAD_SCRIPT=$SCRIPTS_DIR/run_workload.sh"
	"SLURM_SANDBOX_CLUSTER_ENV=$USER_HOME/pathways/cluster.env"
	"SLURM_SANDBOX_LOG_DIR=$LOGS"
	"SLURM_SANDBOX_UP_SCRIPT=$SANDBOX_SLURM_DIR/up.sh"
	"SLURM_SANDBOX_DOWN_SCRIPT=$SANDBOX_SLURM_DIR/down.sh"
)
{
	echo "# Generated by sandbox/slurm/up.sh; values never need quoting."
	printf '%s\n' "${ENV_LINES[@]}"
} >"$OWN_STATE/slurm.env.tmp"
"$PYTHON" - "$OWN_STATE/slurm.json.tmp" "${ENV_LINES[@]}" <<'PY'
import json
import sys

out, *lines = sys.argv[1:]
data = dict(line.split("=", 1) for line in lines)
with open(out, "w") as f:
    json.dump(data, f, indent=2)
    f.write("\n")
PY
chmod 0644 "$OWN_STATE/slurm.env.tmp" "$OWN_STATE/slurm.json.tmp"
mv -f -- "$OWN_STATE/slurm.env.tmp" "$OWN_STATE/slurm.env"
mv -f -- "$OWN_STATE/slurm.json.tmp" "$OWN_STATE/slurm.json"

log "ready in $((SECONDS - STARTED))s: node $NODE_NAME, REST $REST_URL, ssh $SLURM_SANDBOX_USER@$SLURM_SANDBOX_HOST:$SLURM_SANDBOX_SSH_PORT"
log "settings: $OWN_STATE/slurm.env (and slurm.json)"

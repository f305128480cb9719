#!/bin/bash
# Install the headless browser the UI tests drive: Chromium and its driver from Debian's packages.
# Idempotent: a no-op when /usr/bin/chromium exists. Needs root on Debian 12.
#
# Nothing here (nor in the tests) downloads a browser from anywhere else: Playwright is pointed at
# /usr/bin/chromium.
set -euo pipefail

if [[ -x /usr/bin/chromium ]]; then
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "sandbox/ui/install.sh: Chromium is missing and installing it needs root" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
[[ -x /usr/bin/chromium ]] || {
	echo "sandbox/ui/install.sh: chromium is installed but /usr/bin/chromium is missing" >&2
	exit 1
}

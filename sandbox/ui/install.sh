#!/bin/bash
# Install the headless browser the UI tests drive: Chromium and its driver from Debian's packages,
# and libatomic1, which Playwright's bundled node driver links against (sandbox/packages.sh, part
# "ui"). Idempotent. Needs root on Debian 12 to install.
#
# Nothing here (nor in the tests) downloads a browser from anywhere else: Playwright is pointed at
# /usr/bin/chromium.
set -euo pipefail

bash "$(dirname "${BASH_SOURCE[0]}")/../packages.sh" ui
[[ -x /usr/bin/chromium ]] || {
	echo "sandbox/ui/install.sh: chromium is installed but /usr/bin/chromium is missing" >&2
	exit 1
}

"""``python -m sandbox.gcs start|stop|status --state-dir DIR``."""

from __future__ import annotations

import sys

from sandbox.gcs.launcher import main

sys.exit(main())

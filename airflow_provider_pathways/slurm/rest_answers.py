"""Reading slurmrestd's answers beyond job records: a refused token, a ping."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any


def jwt_problem(token: str, login: str) -> str:
    """What is visibly wrong with a JWT (expiry, user), without revealing it."""
    parts = token.split(".")
    if len(parts) != 3:
        return "the token is not a JWT"
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, TypeError):
        return "the token is not a readable JWT"
    if not isinstance(claims, dict):
        return "the token is not a readable JWT"
    problems = []
    exp = claims.get("exp")
    if isinstance(exp, (int, float)) and exp < time.time():
        problems.append(f"it expired at {datetime.fromtimestamp(exp, tz=timezone.utc).isoformat()}")
    user = claims.get("sun")
    if isinstance(user, str) and user != login:
        problems.append(f"it was issued for user {user!r}, not {login!r}")
    return "; ".join(problems) or "it may be invalid, expired or signed with another key"


def ping_answered(payload: Any) -> bool:
    """A ``/slurm/vX/ping`` answer in which slurmctld responded: ``ping: UP`` (v0.0.38), ``pinged:
    UP`` / ``responding: true`` (v0.0.40+); 24.11+ answer 200 even when slurmctld refused the token."""
    pings = payload.get("pings") if isinstance(payload, Mapping) else None
    if not isinstance(pings, list) or not pings:
        return False
    for ping in pings:
        if not isinstance(ping, Mapping):
            continue
        if ping.get("responding") is True or "UP" in (ping.get("ping"), ping.get("pinged")):
            return True
    return False

"""The slurmrestd API versions the provider speaks."""

from __future__ import annotations

import re


def api_version_number(version: str) -> int:
    """``v0.0.40`` → 40."""
    match = re.fullmatch(r"v0\.0\.(\d+)", version)
    if not match:
        raise ValueError(f"not a slurmrestd API version: {version!r} (expected e.g. 'v0.0.40')")
    return int(match.group(1))


#: slurmrestd API versions the provider speaks, newest first: v0.0.38 (Slurm 22.05) to v0.0.45 (26.05).
SUPPORTED_API_VERSIONS = tuple(f"v0.0.{n}" for n in range(45, 37, -1))
SUPPORTED_API_RANGE = f"{SUPPORTED_API_VERSIONS[-1]}..{SUPPORTED_API_VERSIONS[0]}"

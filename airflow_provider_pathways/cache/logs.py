"""The logger interface the cache modules need (a standard or an Airflow task logger)."""

from __future__ import annotations

from typing import Any, Protocol


class Logger(Protocol):
    """Anything with ``info(message, *args)``."""

    def info(self, msg: str, /, *args: Any) -> Any: ...

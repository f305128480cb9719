"""A first try's task instance, and a kill as Airflow 3's task runner delivers it: its supervisor
sends SIGTERM to the task process, whose handler calls the operator's ``on_kill()`` in the main
thread, wherever ``execute`` is, and then lets ``execute`` go on (``task_runner.py``, ``_on_term``;
the SIGKILL 5 s later is not sent here)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any


class FirstTry:
    """The task instance of a first try (no retries) as the task runner gives it to ``execute``."""

    task_id, map_index, try_number, max_tries = "train", -1, 1, 0

    def __init__(self, dag_id: str, run_id: str) -> None:
        self.dag_id, self.run_id = dag_id, run_id
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


@contextlib.contextmanager
def killed_when(operator: Any, event: threading.Event, timeout: float = 60) -> Iterator[None]:
    """Within the block (run it in the main thread), a SIGTERM reaches this process once ``event``
    is set, and its handler calls ``operator.on_kill()``."""
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: operator.on_kill())
    done = threading.Event()

    def kill_when_set() -> None:
        if event.wait(timeout) and not done.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=kill_when_set, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        event.set()
        thread.join(5)
        signal.signal(signal.SIGTERM, previous)

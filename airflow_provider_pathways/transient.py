"""Transient faults: bounded retries of one API call, and the outage a wait may ride out.

Two layers, used the same way by the GKE and Slurm hooks, triggers and polling loops; the first
also by the compilation-cache cleanup's GCS requests:

- one call (a GET, a DELETE, a submit that cannot duplicate) is retried a few times with
  exponential backoff when the error is transient (a connection error, an HTTP status of
  :data:`TRANSIENT_HTTP_STATUSES`, a 429 honouring ``Retry-After``); any other 4xx is never
  retried;
- a wait (a trigger or a polling loop) keeps going through failed looks for as long as the outage
  lasts less than its tolerance, then gives up with a message naming the endpoint and the outage.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
)

T = TypeVar("T")

DEFAULT_OUTAGE_TOLERANCE = 300.0
#: HTTP answers worth a retry: the server did not carry the request out and may the next time.
#: 408 (it did not receive the whole request in time), 429 (too many requests), 500, 502, 503 and
#: 504 (it, or a proxy or load balancer in front of it, failed or is overloaded). These are the
#: statuses Cloud Storage documents as retryable ("HTTP 408, 429, and 5xx response codes",
#: https://cloud.google.com/storage/docs/retry-strategy) and that google-cloud-storage retries
#: (``google.cloud.storage.retry._RETRYABLE_STATUS_CODES``); the Kubernetes API server answers 429
#: and 5xx when overloaded. Other 5xx (501 Not Implemented, 505) do not go away on a retry.
TRANSIENT_HTTP_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 60.0


def describe_error(err: BaseException) -> str:
    """Short error text without response headers or bodies (which may echo credentials)."""
    status = getattr(err, "status", None)
    if status is not None:
        return f"{type(err).__name__} HTTP {status} {getattr(err, 'reason', '') or ''}".rstrip()
    return f"{type(err).__name__}: {err}"


def backoff(attempt: int, *, base: float = 0.5, cap: float = 30.0, jitter: bool = False) -> float:
    """Delay before retry ``attempt`` (1-based): base, 2·base, 4·base, … at most ``cap``; with
    ``jitter``, a random delay between 0 and that ("full jitter", so that many clients refused at
    once do not come back at once)."""
    delay = min(base * 2 ** max(attempt - 1, 0), cap)
    return random.uniform(0.0, delay) if jitter else delay


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header in its delay-seconds form; None when absent or a date."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER) if seconds == seconds else None


@dataclass(frozen=True)
class CallRetry:
    """How one call is retried: at most ``attempts`` tries, backoff from ``base`` up to ``cap``
    (each delay drawn between 0 and that with ``jitter``)."""

    attempts: int = 5
    base: float = 0.5
    cap: float = 10.0
    jitter: bool = False

    def _wait(
        self, retry_after: Callable[[BaseException], float | None]
    ) -> Callable[[RetryCallState], float]:
        def wait(state: RetryCallState) -> float:
            delay = backoff(state.attempt_number, base=self.base, cap=self.cap, jitter=self.jitter)
            error = state.outcome.exception() if state.outcome else None
            hinted = retry_after(error) if error is not None else None
            return max(delay, hinted) if hinted is not None else delay

        return wait

    def _options(
        self,
        is_transient: Callable[[BaseException], bool],
        retry_after: Callable[[BaseException], float | None],
        on_retry: Callable[[BaseException, float], None] | None,
    ) -> dict[str, Any]:
        def before_sleep(state: RetryCallState) -> None:
            if on_retry is not None and state.outcome is not None and state.next_action is not None:
                error = state.outcome.exception()
                if error is not None:
                    on_retry(error, state.next_action.sleep)

        return {
            "stop": stop_after_attempt(max(self.attempts, 1)),
            "wait": self._wait(retry_after),
            "retry": retry_if_exception(is_transient),
            "before_sleep": before_sleep,
            "reraise": True,
        }

    def call(
        self,
        fn: Callable[[], T],
        *,
        is_transient: Callable[[BaseException], bool],
        retry_after: Callable[[BaseException], float | None] = lambda _err: None,
        on_retry: Callable[[BaseException, float], None] | None = None,
    ) -> T:
        """``fn()``, retried while it raises a transient error; the last error is re-raised."""
        for attempt in Retrying(**self._options(is_transient, retry_after, on_retry)):
            with attempt:
                return fn()
        raise AssertionError("unreachable")  # pragma: no cover

    def stream(
        self,
        make: Callable[[], Iterator[T]],
        *,
        is_transient: Callable[[BaseException], bool],
        on_retry: Callable[[BaseException, float], None] | None = None,
    ) -> Iterator[T]:
        """The items of ``make()``; when it raises a transient error, ``make()`` is called again
        (what it already handed on is for it to skip); the last error is re-raised."""
        for attempt in Retrying(**self._options(is_transient, lambda _err: None, on_retry)):
            with attempt:
                yield from make()
                return
        raise AssertionError("unreachable")  # pragma: no cover

    async def a_call(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        is_transient: Callable[[BaseException], bool],
        retry_after: Callable[[BaseException], float | None] = lambda _err: None,
        on_retry: Callable[[BaseException, float], None] | None = None,
    ) -> T:
        """Async twin of :meth:`call`; never blocks the event loop."""
        async for attempt in AsyncRetrying(**self._options(is_transient, retry_after, on_retry)):
            with attempt:
                return await fn()
        raise AssertionError("unreachable")  # pragma: no cover


MAX_OUTAGE_TOLERANCE = 7 * 24 * 3600.0


def validate_outage_tolerance(value: object) -> float:
    """``outage_tolerance`` in seconds (a number or a ``timedelta``); ValueError naming it otherwise."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError(f"outage_tolerance: {value!r} must be seconds (a number) or a timedelta")
    if not 0 <= seconds <= MAX_OUTAGE_TOLERANCE:
        raise ValueError(
            f"outage_tolerance: {value!r} must be between 0 and {MAX_OUTAGE_TOLERANCE:g} seconds (7 days)"
        )
    return float(seconds)


class OutageTooLong(Exception):
    """The service stayed unreachable for longer than the wait tolerates."""


class ConnectionToFix(Exception):
    """Base of the errors that say the connection itself must be fixed (its credentials refused, a
    setting wrong): no retry gets past one, by the same try or a later one. A wait that meets one
    does not ride it out as an outage, nor lose sight of its job to a retry: it fails the try for
    good (:meth:`~airflow_provider_pathways.operators.reattaching.ReattachingJobOperator.fail_for_good`)."""


#: The key of a trigger's ``error`` event that a :class:`ConnectionToFix` ended: the resumed task
#: fails for good. (A task of an older version ignores the key and loses sight of the job, as it did.)
CONNECTION_TO_FIX = "connection_to_fix"


@dataclass
class OutageWindow:
    """
    The outage a wait is riding out: when it started and how many looks failed.

    ``failed()`` returns the delay before the next look, or raises :class:`OutageTooLong` once the
    outage has lasted longer than ``tolerance`` seconds; ``recovered()`` ends it.
    """

    tolerance: float = DEFAULT_OUTAGE_TOLERANCE
    what: str = "the cluster"
    base: float = 1.0
    cap: float = 30.0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    started: float | None = None
    failures: int = 0

    def __post_init__(self) -> None:
        self.tolerance = validate_outage_tolerance(self.tolerance)

    @property
    def ongoing(self) -> bool:
        return self.started is not None

    def failed(self, error: BaseException, detail: str = "") -> float:
        """Record a failed look; the delay before the next one. Raises when the outage is too long."""
        now = self.clock()
        if self.started is None:
            self.started = now
        self.failures += 1
        lasted = now - self.started
        if lasted >= self.tolerance:
            raise OutageTooLong(
                f"{self.what} was unreachable for {lasted:.0f}s (tolerance {self.tolerance:g}s, "
                f"{self.failures} failed attempts); last error: {detail or type(error).__name__}"
            ) from error
        return min(backoff(self.failures, base=self.base, cap=self.cap), max(self.tolerance - lasted, 0.1))

    def recovered(self) -> float | None:
        """End the outage; how long it lasted, or None if there was none."""
        if self.started is None:
            return None
        lasted = self.clock() - self.started
        self.started, self.failures = None, 0
        return lasted

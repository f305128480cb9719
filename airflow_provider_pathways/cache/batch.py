"""The GCS JSON API batch format (``multipart/mixed``, up to 100 calls per request): encode, parse.

Each part of a request is one HTTP call with a ``Content-ID``; each part of the answer carries the
call's status and ``Content-ID: <response-ID>``. Parts are matched by that id, or by position when
a server sends none (GCS answers the parts in the order they were asked).

Why not google-cloud-storage's own batch (``client.batch()`` around ``blob.delete``): the cleanup
counts every object by its own answer (deleted, 412 changed, 404 already gone, or sent and
unanswered), and the library's batch cannot give that:

- the answers of a batch run without raising are kept only in the batch's private
  ``_responses`` (``blob.delete`` returns nothing, ``raise_exception=True`` raises the last
  error only);
- it sends no ``Content-ID`` and matches answers by position, and an answer with a part missing
  fails the whole batch (``ValueError``), so the parts that were answered cannot be told from the
  one that was not: all would have to count as unanswered, and a 404 for an object another
  cleanup deleted would then count as deleted by both;
- it writes the batch with bare LF line ends and full URLs in each call (the GCS
  documentation asks for paths only); fake-gcs-server answers such a batch with no parts at all;
- it was slower than this module in ``bench/bench_cache_cleanup.py`` (part 4; the numbers are in
  ``bench/README.md``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

BATCH_LIMIT = 100
_BOUNDARY = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)
_STATUS_LINE = re.compile(rb"^HTTP/\d(?:\.\d)?\s+(\d{3})")


@dataclass(frozen=True)
class BatchCall:
    """One call inside a batch: method and path with query (``/storage/v1/b/B/o/NAME?...``)."""

    content_id: str
    method: str
    target: str


@dataclass(frozen=True)
class BatchAnswer:
    """One answered call: its id (``None`` if the server sent none), status and body."""

    content_id: str | None
    status: int
    body: bytes


def encode_batch(calls: Sequence[BatchCall]) -> tuple[bytes, str]:
    """The request body and its ``Content-Type`` for ``calls`` (at most :data:`BATCH_LIMIT`)."""
    if not 1 <= len(calls) <= BATCH_LIMIT:
        raise ValueError(f"a batch holds 1 to {BATCH_LIMIT} calls, got {len(calls)}")
    boundary = f"batch_{uuid.uuid4().hex}"
    chunks = []
    for call in calls:
        chunks.append(
            f"--{boundary}\r\n"
            "Content-Type: application/http\r\n"
            "Content-Transfer-Encoding: binary\r\n"
            f"Content-ID: <{call.content_id}>\r\n"
            "\r\n"
            f"{call.method} {call.target} HTTP/1.1\r\n"
            "Content-Length: 0\r\n"
            "\r\n"  # end of the call's headers
            "\r\n"  # belongs to the next delimiter
        )
    chunks.append(f"--{boundary}--\r\n")
    return "".join(chunks).encode("utf-8"), f"multipart/mixed; boundary={boundary}"


def parse_batch_response(content_type: str, body: bytes) -> list[BatchAnswer]:
    """The answers in a ``multipart/mixed`` batch response, in the order the server sent them.

    Raises ``ValueError`` when the response is not a batch response.
    """
    match = _BOUNDARY.search(content_type or "")
    if not content_type.lower().startswith("multipart/") or match is None:
        raise ValueError(f"not a batch response (Content-Type {content_type!r})")
    delimiter = b"--" + match.group(1).encode("latin-1")
    answers: list[BatchAnswer] = []
    for raw in body.split(delimiter)[1:]:
        if raw.startswith(b"--"):
            break  # the closing delimiter
        lines = raw.lstrip(b"\r\n").split(b"\n")
        content_id: str | None = None
        status: int | None = None
        rest_at = len(lines)
        for number, line in enumerate(lines):
            text = line.rstrip(b"\r")
            status_match = _STATUS_LINE.match(text)
            if status_match:
                status, rest_at = int(status_match.group(1)), number + 1
                break
            name, _, value = text.partition(b":")
            if name.strip().lower() == b"content-id":
                content_id = _answer_id(value.decode("latin-1").strip())
        if status is None:
            raise ValueError("a batch response part has no status line")
        rest = b"\n".join(lines[rest_at:])
        _, _, payload = rest.partition(b"\r\n\r\n") if b"\r\n\r\n" in rest else rest.partition(b"\n\n")
        answers.append(BatchAnswer(content_id, status, payload.strip()))
    return answers


def _answer_id(value: str) -> str:
    """``<response-ID>`` -> ``ID``."""
    value = value.strip("<>")
    return value[len("response-") :] if value.startswith("response-") else value

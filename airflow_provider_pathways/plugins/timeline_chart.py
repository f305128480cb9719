"""The timeline chart of a DAG run's Pathways tasks (no Airflow here): one row per try, its job's
phases as bars (queued: submitted to running; starting: running to ready; ready: ready to ended),
the try's own span behind them, the count of ready slices over time as a step line, Kueue's
admission, preempted tries and tries a newer try replaced marked; and the compilation-cache
cleanups' freed bytes. Drawn as one SVG in a plain HTML page (the Airflow UI plugin serves it)."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_provider_pathways.cache.values import format_bytes
from airflow_provider_pathways.tpu_hours import slice_changes

#: The bars of a try, in order, with the milestones that bound each and their colour.
PHASES = (
    ("queued", "submitted", "started", "#c6c6c6"),
    ("starting", "started", "ready", "#8ab4f8"),
    ("ready", "ready", "ended", "#1e8e3e"),
)
PREEMPTED_COLOUR = "#d93025"
ROW, LABEL_WIDTH, CHART_WIDTH = 28, 220, 760


@dataclass(frozen=True)
class TryRow:
    """One try of a task and what it saw of its job (epoch seconds; None: not known)."""

    task: str
    try_number: int
    state: str | None = None
    try_start: float | None = None
    try_end: float | None = None
    submitted: float | None = None
    started: float | None = None
    ready: float | None = None
    ended: float | None = None
    preempted: bool = False
    tpu_hours: float | None = None
    #: (epoch seconds, slices ready from then on), each change the try saw
    slices_ready: tuple[tuple[float, int], ...] = ()
    #: Kueue admitted the job at ``started`` (it was queued until then).
    admitted_later: bool = False
    #: The newer try that took over this try's job (reattached to it); its row draws the job.
    replaced_by: int | None = None


@dataclass(frozen=True)
class CacheRow:
    """One compilation-cache cleanup of the run."""

    task: str
    bytes_freed: int
    objects_freed: int
    dry_run: bool = False


@dataclass(frozen=True)
class RunTimeline:
    dag_id: str
    run_id: str
    tries: tuple[TryRow, ...] = field(default=())
    caches: tuple[CacheRow, ...] = field(default=())


def tries_from_xcom(
    task: str, tpu_hours: Mapping[str, Any] | None, attempts: Iterable[Mapping[str, Any]]
) -> list[TryRow]:
    """The rows of one task: its tries as Airflow recorded them (``attempts``: ``try_number``,
    ``state``, ``start``, ``end``), each with the job milestones its XCom ``tpu_hours`` holds."""
    recorded = {int(t["try_number"]): t for t in (tpu_hours or {}).get("tries") or []}
    replaced_by = {
        int(earlier): number for number, t in recorded.items() for earlier in t.get("replaced_tries") or ()
    }
    rows = []
    for attempt in sorted(attempts, key=lambda a: int(a["try_number"])):
        number = int(attempt["try_number"])
        seen = recorded.get(number, {})
        rows.append(
            TryRow(
                task=task,
                try_number=number,
                state=attempt.get("state"),
                try_start=attempt.get("start"),
                try_end=attempt.get("end"),
                submitted=seen.get("submitted"),
                started=seen.get("started"),
                ready=seen.get("ready"),
                ended=seen.get("ended"),
                preempted=bool(seen.get("preempted")),
                tpu_hours=seen.get("tpu_hours"),
                slices_ready=slice_changes(seen.get("slices_ready")),
                admitted_later=bool(seen.get("admitted_later")),
                replaced_by=replaced_by.get(number),
            )
        )
    return rows


def _span(rows: Sequence[TryRow]) -> tuple[float, float]:
    moments = [
        m
        for r in rows
        for m in (r.try_start, r.try_end, r.submitted, r.started, r.ready, r.ended)
        if m is not None
    ]
    if not moments:
        return 0.0, 1.0
    low, high = min(moments), max(moments)
    return low, max(high, low + 1.0)


def _clock(moment: float) -> str:
    return datetime.fromtimestamp(moment, tz=timezone.utc).strftime("%H:%M:%S")


def render_svg(rows: Sequence[TryRow]) -> str:
    """The chart: a row per try, bars per phase; ``data-*`` attributes name what each element is."""
    low, high = _span(rows)
    scale = CHART_WIDTH / (high - low)

    def x(moment: float) -> float:
        return LABEL_WIDTH + (moment - low) * scale

    height = ROW * (len(rows) + 2)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{LABEL_WIDTH + CHART_WIDTH + 20}" '
        f'height="{height}" font-family="sans-serif" font-size="12" role="img">'
    ]
    for index, row in enumerate(rows):
        top = ROW * (index + 1)
        label = f"{row.task} · try {row.try_number}" + (" · preempted" if row.preempted else "")
        if row.replaced_by is not None:
            label += f" · replaced by try {row.replaced_by}"
        replaced = "" if row.replaced_by is None else f' data-replaced-by="{row.replaced_by}"'
        parts.append(
            f'<g data-task="{html.escape(row.task)}" data-try="{row.try_number}" '
            f'data-state="{html.escape(row.state or "")}" data-preempted="{str(row.preempted).lower()}"'
            f"{replaced}>"
        )
        parts.append(f'<text x="4" y="{top + 17}">{html.escape(label)}</text>')
        if row.try_start is not None:
            end = row.try_end if row.try_end is not None else high
            parts.append(
                f'<rect data-phase="try" x="{x(row.try_start):.1f}" y="{top + 2}" '
                f'width="{max(1.0, (end - row.try_start) * scale):.1f}" height="{ROW - 4}" '
                f'fill="none" stroke="#5f6368" stroke-dasharray="3 2"/>'
            )
        for phase, start_key, end_key, colour in PHASES:
            start, end = getattr(row, start_key), getattr(row, end_key)
            if start is None:
                continue
            if end is None:  # still in this phase when the try ended (or is running)
                end = row.ended if row.ended is not None else (row.try_end or high)
            if end < start:
                continue
            fill = PREEMPTED_COLOUR if row.preempted and phase == "ready" else colour
            title = f"{phase}: {_clock(start)} to {_clock(end)} ({end - start:.0f} s)"
            parts.append(
                f'<rect data-phase="{phase}" x="{x(start):.1f}" y="{top + 6}" '
                f'width="{max(1.0, (end - start) * scale):.1f}" height="{ROW - 12}" fill="{fill}">'
                f"<title>{html.escape(title)}</title></rect>"
            )
        if row.admitted_later and row.started is not None:
            parts.append(
                f'<line data-phase="admitted" x1="{x(row.started):.1f}" x2="{x(row.started):.1f}" '
                f'y1="{top + 2}" y2="{top + ROW - 2}" stroke="#202124" stroke-width="2">'
                f"<title>{html.escape(f'admitted by Kueue at {_clock(row.started)}')}</title></line>"
            )
        if row.slices_ready:
            parts.append(_slice_steps(row, x, top, row.ended or row.try_end or high))
        if row.ended is not None:
            mark = "✕" if row.preempted else "■"
            parts.append(f'<text data-phase="ended" x="{x(row.ended) + 3:.1f}" y="{top + 17}">{mark}</text>')
        parts.append("</g>")
    axis = ROW * (len(rows) + 1) + 14
    parts.append(f'<text x="{LABEL_WIDTH}" y="{axis}">{_clock(low)} UTC</text>')
    parts.append(f'<text x="{LABEL_WIDTH + CHART_WIDTH}" y="{axis}" text-anchor="end">{_clock(high)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _slice_steps(row: TryRow, x: Any, top: float, until: float) -> str:
    """The ready-slice count over the row as a step line until ``until`` (the job's end: a count seen
    after the end it recorded is not drawn; the row's height is the most it reached), each step
    titled with its count."""
    changes = [change for change in row.slices_ready if change[0] <= until] or list(row.slices_ready[:1])
    most = max(count for _, count in changes) or 1
    bottom, height = top + ROW - 5, ROW - 10
    points: list[str] = []
    for (at, count), following in zip(changes, (*changes[1:], (until, -1)), strict=True):
        y = bottom - height * count / most
        points += [f"{x(at):.1f},{y:.1f}", f"{x(max(at, following[0])):.1f},{y:.1f}"]
    steps = ", ".join(f"{_clock(at)}: {count}" for at, count in changes)
    return (
        f'<polyline data-phase="slices" data-counts="{" ".join(str(c) for _, c in changes)}" '
        f'points="{" ".join(points)}" fill="none" stroke="#202124" stroke-width="1.5">'
        f"<title>{html.escape('slices ready, ' + steps)}</title></polyline>"
    )


def render_page(timeline: RunTimeline) -> str:
    """The HTML page: the chart, a legend, the tries' TPU-hours and the cache cleanups."""
    title = f"Pathways timeline · {timeline.dag_id} · {timeline.run_id}"
    legend = "".join(
        f'<span><i style="background:{colour}"></i>{phase}</span>' for phase, _, _, colour in PHASES
    )
    legend += f'<span><i style="background:{PREEMPTED_COLOUR}"></i>preempted</span>'
    legend += '<span><i style="height:2px;background:#202124"></i>slices ready (step line)</span>'
    legend += '<span><i style="width:2px;background:#202124"></i>admitted by Kueue</span>'
    body = [f"<h1>{html.escape(title)}</h1>"]
    if timeline.tries:
        body += [f'<div class="legend">{legend}</div>', render_svg(timeline.tries)]
        hours = [
            f"<tr><td>{html.escape(r.task)}</td><td>{r.try_number}</td><td>{html.escape(r.state or '')}</td>"
            f"<td>{'' if r.tpu_hours is None else f'{r.tpu_hours:.4f}'}</td>"
            f"<td>{'yes' if r.preempted else ''}</td></tr>"
            for r in timeline.tries
        ]
        body.append(
            '<table id="tries"><tr><th>task</th><th>try</th><th>state</th><th>TPU-hours</th>'
            "<th>preempted</th></tr>" + "".join(hours) + "</table>"
        )
    else:
        body.append('<p id="empty">No Pathways job ran in this DAG run.</p>')
    if timeline.caches:
        rows = "".join(
            f'<tr data-task="{html.escape(c.task)}"><td>{html.escape(c.task)}</td>'
            f"<td>{format_bytes(c.bytes_freed)}</td><td>{c.objects_freed}</td>"
            f"<td>{'report only' if c.dry_run else ''}</td></tr>"
            for c in timeline.caches
        )
        body.append(
            '<h2>Compilation cache</h2><table id="cache"><tr><th>task</th><th>freed</th>'
            f"<th>objects</th><th></th></tr>{rows}</table>"
        )
    style = (
        "body{font-family:sans-serif;margin:16px;color:#202124}h1{font-size:18px}h2{font-size:15px}"
        ".legend span{margin-right:14px}.legend i{display:inline-block;width:12px;height:12px;"
        "margin-right:4px;vertical-align:middle}table{border-collapse:collapse;margin-top:12px}"
        "td,th{border:1px solid #dadce0;padding:3px 8px;text-align:left}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>"
    )

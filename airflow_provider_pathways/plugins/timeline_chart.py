"""The timeline chart of a DAG run's Pathways tasks (no Airflow here): one row per try, its job's
phases as bars (queued: submitted to running; starting: running to ready; ready: ready to ended),
the try's own span behind them, the count of ready slices over time as a step line, Kueue's
admission, preempted tries and tries a newer try replaced marked; and the compilation-cache
cleanups' freed bytes. Drawn as one SVG in a plain HTML page (the Airflow UI plugin serves it)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_provider_pathways.cache.values import format_bytes
from airflow_provider_pathways.tpu_hours import slice_changes

#: The bars of a try, in order, with the milestones that bound each, their colour and the colour
#: of the text written in them.
PHASES = (
    ("queued", "submitted", "started", "#c6c6c6", "#202124"),
    ("starting", "started", "ready", "#8ab4f8", "#202124"),
    ("ready", "ready", "ended", "#1e8e3e", "#ffffff"),
)
PREEMPTED_COLOUR = "#d93025"
ROW, LABEL_WIDTH, CHART_WIDTH = 28, 220, 760
#: Spacings of the time axis's ticks, in seconds: the first that draws at most MAX_TICKS.
TICK_SECONDS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_TICKS = 10
#: Width of a character of the chart's 11 px text, for what fits in a bar (an upper bound).
CHAR_WIDTH = 6.6


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


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min 5 s``, ``3 h 20 min``: a span, to the second under ten minutes."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def time_ticks(low: float, high: float) -> list[tuple[float, str]]:
    """The time axis's ticks between ``low`` and ``high`` (epoch seconds) and their labels (UTC):
    whole multiples of the first spacing of :data:`TICK_SECONDS` that draws at most
    :data:`MAX_TICKS`; seconds shown under a minute's spacing, the date where the run spans days."""
    span = max(high - low, 1.0)
    step = next((s for s in TICK_SECONDS if span / s < MAX_TICKS), None)
    if step is None:  # longer than ten days: whole days
        step = TICK_SECONDS[-1] * (math.floor(span / (TICK_SECONDS[-1] * (MAX_TICKS - 1))) + 1)
    days = (
        datetime.fromtimestamp(low, tz=timezone.utc).date()
        != datetime.fromtimestamp(high, tz=timezone.utc).date()
    )
    pattern = "%H:%M:%S" if step < 60 else "%H:%M"
    ticks: list[tuple[float, str]] = []
    at = math.ceil(low / step) * step
    while at <= high:
        moment = datetime.fromtimestamp(at, tz=timezone.utc)
        label = moment.strftime(pattern)
        if days and (not ticks or moment.strftime("%H:%M:%S") == "00:00:00"):
            label = moment.strftime("%d %b ") + label
        ticks.append((float(at), label))
        at += step
    return ticks


def _bar_text(phase: str, seconds: float, width: float, kueue: bool) -> str | None:
    """What a bar of ``width`` px says: its phase and duration, else the duration, else nothing."""
    name = "queued (Kueue)" if kueue else phase
    for text in (f"{name} {format_duration(seconds)}", format_duration(seconds)):
        if len(text) * CHAR_WIDTH + 8 <= width:
            return text
    return None


def _row_summary(row: TryRow) -> str:
    """The hover text of a try: its state, span, job milestones and TPU-hours."""
    parts = [f"{row.task} · try {row.try_number}: {row.state or 'no state'}"]
    if row.try_start is not None:
        end = (
            f"{_clock(row.try_end)} ({format_duration(row.try_end - row.try_start)})"
            if row.try_end
            else "now"
        )
        parts.append(f"try {_clock(row.try_start)} to {end}")
    milestones = [(name, getattr(row, name)) for name in ("submitted", "started", "ready", "ended")]
    seen = [f"{name} {_clock(at)}" for name, at in milestones if at is not None]
    if seen:
        parts.append("job " + ", ".join(seen))
    if row.tpu_hours is not None:
        parts.append(f"{row.tpu_hours:.4f} TPU-hours")
    if row.preempted:
        parts.append("preempted")
    if row.replaced_by is not None:
        parts.append(f"its job followed on by try {row.replaced_by}")
    return "; ".join(parts)


def render_svg(rows: Sequence[TryRow]) -> str:
    """The chart: a time axis with ticks above and below, a row per try, bars per phase (with their
    phase and duration where they fit); ``data-*`` attributes name what each element is, and
    ``<title>`` elements give the details on hover."""
    low, high = _span(rows)
    scale = CHART_WIDTH / (high - low)

    def x(moment: float) -> float:
        return LABEL_WIDTH + (moment - low) * scale

    height = ROW * (len(rows) + 2)
    bottom = ROW * (len(rows) + 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{LABEL_WIDTH + CHART_WIDTH + 40}" '
        f'height="{height}" font-family="sans-serif" font-size="12" role="img">'
    ]
    parts.append(f'<text x="{LABEL_WIDTH - 8}" y="{ROW - 10}" text-anchor="end" fill="#5f6368">UTC</text>')
    for at, label in time_ticks(low, high):
        tick_x, text = x(at), html.escape(label)
        labels = "".join(
            f'<text x="{tick_x:.1f}" y="{y}" text-anchor="middle" fill="#5f6368">{text}</text>'
            for y in (ROW - 10, bottom + 18)
        )
        parts.append(
            f'<g data-tick="{text}"><line x1="{tick_x:.1f}" x2="{tick_x:.1f}" y1="{ROW - 4}" '
            f'y2="{bottom + 4}" stroke="#e8eaed"/>{labels}</g>'
        )
    for index, row in enumerate(rows):
        top = ROW * (index + 1)
        label = f"{row.task} · try {row.try_number}" + (" · preempted" if row.preempted else "")
        if row.replaced_by is not None:
            label += f" · replaced by try {row.replaced_by}"
        summary = html.escape(_row_summary(row))
        replaced = "" if row.replaced_by is None else f' data-replaced-by="{row.replaced_by}"'
        parts.append(
            f'<g data-task="{html.escape(row.task)}" data-try="{row.try_number}" '
            f'data-state="{html.escape(row.state or "")}" data-preempted="{str(row.preempted).lower()}"'
            f"{replaced}>"
        )
        parts.append(f'<text x="4" y="{top + 17}">{html.escape(label)}<title>{summary}</title></text>')
        if row.try_start is not None:
            end = row.try_end if row.try_end is not None else high
            parts.append(
                f'<rect data-phase="try" x="{x(row.try_start):.1f}" y="{top + 2}" '
                f'width="{max(1.0, (end - row.try_start) * scale):.1f}" height="{ROW - 4}" '
                f'fill="none" stroke="#5f6368" stroke-dasharray="3 2"><title>{summary}</title></rect>'
            )
        for phase, start_key, end_key, colour, text_colour in PHASES:
            start, end = getattr(row, start_key), getattr(row, end_key)
            if start is None:
                continue
            if end is None:  # still in this phase when the try ended (or is running)
                end = row.ended if row.ended is not None else (row.try_end or high)
            if end < start or (end == start and phase != "ready"):  # a job ready as it started
                continue
            preempted = row.preempted and phase == "ready"
            fill = PREEMPTED_COLOUR if preempted else colour
            kueue = phase == "queued" and row.admitted_later
            what = "queued until Kueue admitted it" if kueue else phase
            title = f"{what}: {_clock(start)} to {_clock(end)} ({format_duration(end - start)})"
            width = max(1.0, (end - start) * scale)
            parts.append(
                f'<rect data-phase="{phase}" x="{x(start):.1f}" y="{top + 6}" '
                f'width="{width:.1f}" height="{ROW - 12}" fill="{fill}">'
                f"<title>{html.escape(title)}</title></rect>"
            )
            written = _bar_text(phase, end - start, width, kueue)
            if written is not None:
                parts.append(
                    f'<text data-label="{phase}" x="{x(start) + 4:.1f}" y="{top + 18}" font-size="11" '
                    f'fill="{"#ffffff" if preempted else text_colour}" pointer-events="none">'
                    f"{html.escape(written)}</text>"
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
    last = changes[-1][1]
    return (
        f'<polyline data-phase="slices" data-counts="{" ".join(str(c) for _, c in changes)}" '
        f'points="{" ".join(points)}" fill="none" stroke="#202124" stroke-width="1.5">'
        f"<title>{html.escape('slices ready, ' + steps)}</title></polyline>"
        f'<text data-label="slices" x="{x(until) + 14:.1f}" y="{top + 17}" font-size="11" fill="#202124">'
        f"{last}/{most}<title>{html.escape(f'{last} slices ready at the end, {most} at most')}</title></text>"
    )


def render_page(timeline: RunTimeline) -> str:
    """The HTML page: the chart, a legend, the tries' TPU-hours and the cache cleanups."""
    title = f"Pathways timeline · {timeline.dag_id} · {timeline.run_id}"
    legend = "".join(
        f'<span><i style="background:{colour}"></i>{phase}</span>' for phase, _, _, colour, _ in PHASES
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

"""The timeline chart of a run's Pathways tries (what the UI plugin serves)."""

from __future__ import annotations

import re

from airflow_provider_pathways.plugins.timeline_chart import (
    CHART_WIDTH,
    LABEL_WIDTH,
    CacheRow,
    RunTimeline,
    render_page,
    time_ticks,
    tries_from_xcom,
)

# XCom tpu_hours of a task whose first try was preempted
PHASES = ("try_number", "submitted", "started", "ready", "ended", "preempted", "tpu_hours")
TPU_HOURS = {
    "tries": [
        {
            **dict(zip(PHASES, (1, 100.0, 102.0, 105.0, 130.0, True, 0.25), strict=True)),
            "slices_ready": [[102.0, 0], [104.0, 1], [105.0, 2], [129.0, 1]],  # a slice preempted
        },
        dict(zip(PHASES, (2, 140.0, 141.0, 143.0, 200.0, False, 0.5), strict=True)),
    ]
}
ATTEMPTS = [
    {"try_number": 2, "state": "success", "start": 139.0, "end": 201.0},
    {"try_number": 1, "state": "up_for_retry", "start": 99.0, "end": 131.0},
]


def test_each_try_is_a_row_with_its_job_phases_and_the_preemption_marked() -> None:
    rows = tries_from_xcom("train", TPU_HOURS, ATTEMPTS)
    assert [(r.try_number, r.state, r.preempted) for r in rows] == [
        (1, "up_for_retry", True),
        (2, "success", False),
    ]
    page = render_page(RunTimeline("dag", "run", tuple(rows), (CacheRow("cleanup", 3 * 1024**2, 7),)))
    assert page.count('<g data-task="train"') == 2
    assert 'data-try="1" data-state="up_for_retry" data-preempted="true"' in page
    for phase in ("try", "queued", "starting", "ready"):
        assert page.count(f'data-phase="{phase}"') == 2, phase
    assert "<td>cleanup</td><td>3.0 MiB</td><td>7</td>" in page
    # the ready slices of try 1 over time, as a step line: up to 2, down to 1 at the preemption
    assert page.count('data-phase="slices"') == 1 and 'data-counts="0 1 2 1"' in page


def test_a_try_the_xcom_does_not_cover_is_drawn_from_the_task_instance_alone() -> None:
    """Before Airflow 3.3 XCom tpu_hours holds the last try only: the first shows its span, no phases."""
    rows = tries_from_xcom("train", {"tries": TPU_HOURS["tries"][1:]}, ATTEMPTS)
    assert (rows[0].started, rows[0].try_start) == (None, 99.0)
    page = render_page(RunTimeline("dag", "run", tuple(rows)))
    assert page.count('data-phase="try"') == 2 and page.count('data-phase="queued"') == 1


def test_a_run_without_pathways_jobs_says_so_and_names_are_escaped() -> None:
    page = render_page(RunTimeline("<dag>", "run&1"))
    assert 'id="empty"' in page and "&lt;dag&gt;" in page and "run&amp;1" in page


def test_kueue_admission_and_a_try_a_newer_try_replaced_are_marked() -> None:
    """Try 2 reattached to try 1's job, which Kueue admitted at 102: the job is drawn once, on try
    2's row (``replaced_tries``), with its admission; try 1's row says it was replaced."""
    merged = {**TPU_HOURS["tries"][0], "try_number": 2, "preempted": False}
    usage = {"tries": [{**merged, "admitted_later": True, "replaced_tries": [1]}]}
    attempts = [{**ATTEMPTS[1], "state": "up_for_retry"}, ATTEMPTS[0]]
    first, second = tries_from_xcom("train", usage, attempts)
    assert (first.replaced_by, first.started, second.replaced_by, second.admitted_later) == (
        2,
        None,
        None,
        True,
    )
    page = render_page(RunTimeline("dag", "run", (first, second)))
    assert 'data-try="1" data-state="up_for_retry" data-preempted="false" data-replaced-by="2"' in page
    assert "train · try 1 · replaced by try 2" in page
    assert page.count('data-phase="admitted"') == 1 and "admitted by Kueue at 00:01:42" in page
    assert page.count('data-phase="queued"') == 1  # the job's bars on try 2's row only


def test_the_slice_line_stops_at_the_end_the_job_recorded() -> None:
    """A watcher may see the count drop after the job's recorded end (it looked later): the line
    ends at the end, as the bars do."""
    seen = {**TPU_HOURS["tries"][1], "slices_ready": [[141.0, 2], [199.0, 2], [203.0, 0]]}
    (row,) = tries_from_xcom("train", {"tries": [seen]}, ATTEMPTS[:1])
    page = render_page(RunTimeline("dag", "run", (row,)))
    assert 'data-counts="2 2"' in page and "03:23" not in page


HOUR = 498_894  # 2026-11-30 06:00 UTC, in hours since the epoch


def test_the_time_axis_has_ticks_at_round_moments_for_short_and_long_runs() -> None:
    # 100 s: every 15 s, with seconds; 6 hours: every hour; a run over midnight names the dates
    assert [label for _, label in time_ticks(100.0, 200.0)] == [
        "00:01:45",
        "00:02:00",
        "00:02:15",
        "00:02:30",
        "00:02:45",
        "00:03:00",
        "00:03:15",
    ]
    six_hours = time_ticks(HOUR * 3600 + 1200, HOUR * 3600 + 1200 + 6 * 3600)  # 06:20 to 12:20
    assert [label for _, label in six_hours] == ["07:00", "08:00", "09:00", "10:00", "11:00", "12:00"]
    assert all(at % 3600 == 0 for at, _ in six_hours)
    over_midnight = [label for _, label in time_ticks(1_796_083_200.0 - 7200, 1_796_083_200.0 + 7200)]
    assert over_midnight[0] == "30 Nov 22:00" and "01 Dec 00:00" in over_midnight
    for low, high in ((0.0, 1.0), (0.0, 59.0), (0.0, 86400.0 * 3), (0.0, 86400.0 * 40)):
        assert 1 <= len(time_ticks(low, high)) <= 10


def test_bars_say_their_phase_and_duration_where_they_fit_and_on_hover() -> None:
    rows = tries_from_xcom("train", TPU_HOURS, ATTEMPTS)
    page = render_page(RunTimeline("dag", "run", tuple(rows)))
    # try 2 was ready from 143 to 200 (57 s of a 102 s chart): wide enough for its name
    assert '<text data-label="ready"' in page and ">ready 57 s</text>" in page
    assert "<title>ready: 00:02:23 to 00:03:20 (57 s)</title>" in page
    # try 1 was queued 2 s: too narrow to write in, said on hover
    assert "<title>queued: 00:01:40 to 00:01:42 (2 s)</title>" in page and ">queued 2 s<" not in page
    # hovering a try's label or span tells its state, span, job and TPU-hours
    assert (
        "train · try 1: up_for_retry; try 00:01:39 to 00:02:11 (32 s); job submitted 00:01:40, started "
        "00:01:42, ready 00:01:45, ended 00:02:10; 0.2500 TPU-hours; preempted"
    ) in page
    assert page.count('data-tick="') >= 5
    assert 'data-label="slices"' in page and ">1/2<" in page  # try 1 ended with 1 of its 2 slices


def test_a_long_run_of_many_tries_stays_legible() -> None:
    """Dozens of tries over hours: one row each, the axis in whole hours, each Kueue wait and slice
    count said, nothing drawn outside the chart."""
    start = HOUR * 3600.0 + 1200  # 06:20
    tries = []
    for number in range(1, 37):
        begin = start + (number - 1) * 600
        tries.append(
            {
                "try_number": number,
                "submitted": begin,
                "started": begin + 240,
                "ready": begin + 300,
                "ended": begin + 590,
                "preempted": number < 36,
                "admitted_later": True,
                "slices_ready": [[begin + 260, 1], [begin + 300, 4], [begin + 580, 3]],
            }
        )
    attempts = [
        {
            "try_number": t["try_number"],
            "state": "up_for_retry",
            "start": t["submitted"] - 1,
            "end": t["ended"] + 1,
        }
        for t in tries
    ]
    page = render_page(RunTimeline("dag", "run", tuple(tries_from_xcom("train", {"tries": tries}, attempts))))
    assert page.count('<g data-task="train"') == 36
    assert re.findall(r'data-tick="([^"]+)"', page) == ["07:00", "08:00", "09:00", "10:00", "11:00", "12:00"]
    assert page.count("queued until Kueue admitted it") == 36 and page.count('data-phase="admitted"') == 36
    assert page.count(">3/4<") == 36
    xs = [float(value) for value in re.findall(r' x="([0-9.]+)"', page)]
    assert max(xs) <= LABEL_WIDTH + CHART_WIDTH + 40


def test_slurm_tries_are_drawn_from_their_records() -> None:
    """A Slurm workload (ready from its start: it runs against a ready service) and its slices while it
    ran, as ``SlurmJobOperator`` records them."""
    workload = {
        "try_number": 1,
        "job": "812",
        "submitted": 100.0,
        "started": 110.0,
        "ready": 110.0,
        "ended": 170.0,
        "slice_hours": 0.0333,
        "tpu_hours": 0.2667,
        "slices_ready": [[110.0, 2]],
    }
    (row,) = tries_from_xcom("train", {"tries": [workload]}, [{"try_number": 1, "state": "success"}])
    page = render_page(RunTimeline("dag", "run", (row,)))
    assert 'data-phase="queued"' in page and 'data-phase="ready"' in page
    assert 'data-phase="starting"' not in page  # no width: ready from the start
    assert 'data-counts="2"' in page and "<td>0.2667</td>" in page

"""The timeline chart of a run's Pathways tries (what the UI plugin serves)."""

from __future__ import annotations

from airflow_provider_pathways.plugins.timeline_chart import (
    CacheRow,
    RunTimeline,
    render_page,
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

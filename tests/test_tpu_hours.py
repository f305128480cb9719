"""TPU-hours of a task's tries (the rules in ``tpu_hours``'s docstring) and the milestones a job's
timeline records."""

from __future__ import annotations

import random

import pytest

from airflow_provider_pathways.tpu_hours import MILESTONES, Timeline, TryUsage, tpu_hours


def one(try_number: int, job: str, started: float | None, ended: float | None, **kw: object) -> TryUsage:
    values: dict[str, object] = {"tpu_type": "v6e-16", "chips_per_slice": 16, "slices": 2, **kw}
    return TryUsage(try_number, job, started=started, ended=ended, **values)  # type: ignore[arg-type]


def test_chips_times_slices_times_wall_hours() -> None:
    usage = tpu_hours([one(1, "a", 1000.0, 1000.0 + 1800)])
    assert usage.tries[0].tpu_hours == pytest.approx(16 * 2 * 0.5)
    assert usage.total == pytest.approx(16.0) and usage.complete
    assert usage.summary(1) == (
        "TPU-hours: try 1 16.0000 (v6e-16: 16 chips x 2 slices x 30.00 min); task 16.0000 over 1 try"
    )


def test_an_unknown_quantity_is_said_not_guessed() -> None:
    usage = tpu_hours([one(1, "a", 0.0, 3600.0), one(2, "b", 0.0, 3600.0, chips_per_slice=None)])
    assert usage.tries[1].tpu_hours is None
    assert usage.tries[1].unknown() == "chips per slice"
    assert usage.total == pytest.approx(32.0) and not usage.complete
    assert usage.summary(2).startswith("TPU-hours: try 2 unknown (no chips per slice); task at least 32.0000")
    not_ended = tpu_hours([one(1, "a", 0.0, None)])  # wait_until="ready": the job outlives the try
    assert not_ended.tries[0].unknown() == "end (the job had not ended when the try did)"
    assert not_ended.to_dict()["tries"][0]["tpu_hours"] is None


def test_a_job_followed_by_two_tries_counts_once_with_its_whole_run() -> None:
    usage = tpu_hours([one(2, "a", 200.0, 3600.0), one(1, "a", 0.0, None)])
    (only,) = usage.tries
    assert (only.try_number, only.started, only.ended) == (2, 0.0, 3600.0)
    assert usage.total == pytest.approx(32.0)


def test_the_share_lost_to_preempted_tries() -> None:
    usage = tpu_hours([one(1, "a", 0.0, 900.0, preempted=True), one(2, "b", 1000.0, 1000.0 + 2700)])
    assert usage.lost_to_preemption == pytest.approx(8.0)
    assert usage.lost_share == pytest.approx(0.25)
    data = usage.to_dict()
    assert (data["total"], data["lost_to_preemption"], data["lost_share"]) == (32.0, 8.0, 0.25)
    assert "8.0000 (25%) lost to preempted tries" in usage.summary(2)
    assert [TryUsage.from_dict(t) for t in data["tries"]] == list(usage.tries)


def test_tries_the_scheduler_kept_no_record_of_make_the_total_a_lower_bound() -> None:
    usage = tpu_hours([one(3, "c", 0.0, 3600.0)], unrecorded=2)
    assert usage.total == pytest.approx(32.0) and not usage.complete
    assert usage.to_dict()["unrecorded_tries"] == 2
    assert usage.summary(3).endswith("task at least 32.0000 over 1 try (2 earlier not recorded)")


def test_the_timeline_records_each_milestone_once_and_its_start() -> None:
    timeline = Timeline()
    assert timeline.observe(now=10.0, submitted=4.0, running=False, ready=False, ended=False) == ()
    assert timeline.observe(now=12.0, running=True, ready=True, ended=False) == ("running", "ready")
    assert timeline.observe(now=13.0, running=True, ready=True, ended=False) == ()
    assert timeline.observe(now=20.0, running=False, ready=False, ended=True) == ("ended",)
    assert (timeline.since_submitted("running"), timeline.since_submitted("ended")) == (8.0, 16.0)
    assert timeline.started == 12.0
    assert Timeline.from_dict(timeline.to_dict()) == timeline
    # ended before anyone saw it running: its creation, unless a queue admits it later
    seen_late = Timeline()
    seen_late.observe(now=9.0, submitted=4.0, running=False, ready=False, ended=True)
    assert seen_late.started == 4.0
    queued = Timeline()
    queued.observe(now=9.0, submitted=4.0, running=False, ready=False, ended=True, admitted_later=True)
    assert queued.started is None
    assert Timeline.from_dict(None) == Timeline() == Timeline.from_dict({"running": "x"})


def test_the_timeline_keeps_each_change_of_the_ready_slices() -> None:
    timeline = Timeline()
    for now, ready in ((1.0, 0), (2.0, 0), (3.0, 1), (4.0, 2), (5.0, 1), (6.0, 1)):
        timeline.observe(now=now, running=True, ready=ready == 2, ended=False, slices_ready=ready)
    assert timeline.slices_ready == ((1.0, 0), (3.0, 1), (4.0, 2), (5.0, 1))
    again = Timeline.from_dict(timeline.to_dict())
    assert again == timeline and timeline.to_dict()["slices_ready"][1] == [3.0, 1]
    one = TryUsage.from_dict({"try_number": 1, "job": "a", "slices_ready": [[3.0, 1], ["x", 2], [4.0, 2]]})
    assert one.slices_ready == ((3.0, 1), (4.0, 2))  # what cannot be read is left out


def test_moments_the_job_recorded_count_for_a_watcher_that_came_late() -> None:
    """A watcher that first looks at a job after it ran (a moved trigger, a retry) takes the job's
    recorded moments; one that watched keeps what it saw unless the record is earlier (exact)."""
    late = Timeline()
    records = {"running": 5.0, "ready": 7.0, "ended": 9.0}
    reached = late.observe(
        now=30.0, submitted=4.0, running=False, ready=False, ended=True, recorded=records, slices_total=2
    )
    assert reached == ("running", "ready", "ended")
    assert (late.started, late.ready, late.ended) == (5.0, 7.0, 9.0)
    assert late.slices_ready == ((7.0, 2),)  # the step to all slices, at the recorded readiness
    # records have whole seconds: within one second of the record, the moment seen is finer
    watched = Timeline()
    watched.observe(now=4.5, submitted=4.0, running=False, ready=False, ended=False, slices_ready=0)
    watched.observe(now=7.4, running=True, ready=True, ended=False, slices_ready=2, recorded={"ready": 7.0})
    # a restart's later readiness does not move the first one; the series stays as seen
    watched.observe(now=20.0, running=True, ready=True, ended=False, slices_ready=2, recorded={"ready": 15.0})
    assert (watched.running, watched.ready) == (7.4, 7.4)
    assert watched.slices_ready == ((4.5, 0), (7.4, 2))
    # a watcher that looked a second or more after the recorded moment was not watching then
    moved = Timeline()
    moved.observe(now=9.5, submitted=4.0, running=True, ready=True, ended=False, recorded={"ready": 7.0})
    assert (moved.running, moved.ready, moved.slices_ready) == (7.0, 7.0, ())


def test_a_job_that_ended_in_the_second_it_was_seen_ready_ends_after_it() -> None:
    """JobSet conditions carry whole seconds (metav1.Time): a job polled ready at 13.7 whose
    Completed condition says 13 (seen ended at 14.02) ended after 13.7, not before it was ready."""
    timeline = Timeline()
    timeline.observe(now=13.49, submitted=11.0, running=True, ready=False, ended=False)
    timeline.observe(
        now=13.7, running=True, ready=True, ended=False, recorded={"running": 13.0, "ready": 13.0}
    )
    records = {"running": 13.0, "ready": 13.0, "ended": 13.0}
    timeline.observe(now=14.02, running=False, ready=False, ended=True, recorded=records)
    assert (timeline.started, timeline.ready, timeline.ended) == (13.49, 13.7, 13.7)
    # a watcher that saw it running a second or more after it was recorded ready was late
    late = Timeline()
    late.observe(now=9.5, running=True, ready=False, ended=False)
    late.observe(now=12.0, running=False, ready=False, ended=True, recorded={"ready": 7.0, "ended": 8.0})
    assert (late.started, late.ready, late.ended) == (7.0, 7.0, 8.0)


@pytest.mark.parametrize("seed", range(20))
def test_milestones_stay_in_order_whatever_the_records_say(seed: int) -> None:
    """running <= ready <= ended after every observation, for any mix of seen and recorded moments."""
    chance = random.Random(seed)
    timeline, now = Timeline(), 100.0
    for _ in range(6):
        now += chance.choice([0.1, 0.3, 0.7, 1.2])
        records = {k: float(chance.randint(97, 108)) for k in MILESTONES if chance.random() < 0.4}
        timeline.observe(
            now=now,
            running=chance.random() < 0.5,
            ready=chance.random() < 0.5,
            ended=chance.random() < 0.3,
            recorded=records,
        )
        moments = [getattr(timeline, k) for k in MILESTONES if getattr(timeline, k) is not None]
        assert moments == sorted(moments), timeline


def test_a_try_that_took_over_a_job_lists_the_tries_it_replaced() -> None:
    merged = tpu_hours(
        [one(1, "a", 10.0, None, admitted_later=True), one(2, "a", None, 20.0), one(3, "a", None, 30.0)]
    )
    (only,) = merged.tries
    assert (only.try_number, only.replaced_tries, only.admitted_later) == (3, (1, 2), True)
    # plain JSON (a task_state_store refuses tuples)
    assert only.to_dict()["replaced_tries"] == [1, 2] and only.to_dict()["slices_ready"] == []
    assert TryUsage.from_dict(only.to_dict()) == only

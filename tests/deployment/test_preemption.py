"""A preempted job when the DAG sets no ``retries``: the operators retry preemptions anyway
(``preemption_retries``); an explicit ``retries=0`` wins."""

from __future__ import annotations

import os
from urllib.parse import urlencode

import pytest

from airflow_provider_pathways import metrics
from tests.deployment.harness import FINISHED_TI_STATES, TaskOutcome, outcome
from tests.deployment.scenarios import Stage, scenario
from tests.deployment.steps import WAIT, gke_end_program, gke_waiting, namespace, slurm_waiting

PLATFORMS = ("gke", "slurm_rest", "slurm_ssh")
RETRIES = ("unset", "zero")
RUN_TIMEOUT = 300
ROOM = 12  # idle CPUs before a job meant to be preempted is submitted
FIRST_BURST = ("slurm_happy", "service_happy", "mark_failed")


def _drill(platform: str, retries: str) -> str | None:
    return None if platform == "gke" else "preemption"


@scenario("preempt[{platform}-retries-{retries}]", drill=_drill, platform=PLATFORMS, retries=RETRIES)
def preempt_once(stage: Stage, name: str, platform: str, retries: str) -> TaskOutcome:
    airflow = stage.airflow
    kind = "no_retries" if retries == "unset" else "retries_zero"
    gke = platform == "gke"
    if gke:
        dag_id = f"gke_preempt_{kind}"
        run_id = airflow.trigger(dag_id)
        job = gke_waiting(stage, dag_id, run_id, "deferred")
        stage.kube.action(namespace(dag_id), job, "preempt-slice", slice=0)
    else:
        dag_id = f"slurm_preempt_{kind}_{platform.split('_')[1]}"
        stage.after(FIRST_BURST)  # the suite's first burst of high jobs would preempt it early
        stage.slurm.wait_room(ROOM)
        run_id = airflow.trigger(dag_id, stage.slurm_conf)
        job = slurm_waiting(stage, dag_id, run_id, "deferred")
        stage.drill("preemption").arrive(name, job)
    ti = airflow.wait_ti(
        dag_id,
        run_id,
        "train",
        "try 2 deferred, or the end",
        lambda t: (t["try_number"] == 2 and t["state"] == "deferred") or t["state"] in FINISHED_TI_STATES,
        WAIT,
    )
    if ti["state"] == "deferred":
        if gke:
            gke_end_program(stage, dag_id, gke_waiting(stage, dag_id, run_id, "deferred", 2))
        else:
            slurm_waiting(stage, dag_id, run_id, "deferred", 2, starts=2)
            stage.slurm.release(dag_id, 0)
    airflow.wait_run(dag_id, run_id, RUN_TIMEOUT)
    seen = outcome(airflow, dag_id, run_id)
    if gke:
        seen.extra["jobs"] = list(stage.kube.jobs_created(namespace(dag_id)))
        seen.extra["program_runs"] = stage.kube.program_runs(namespace(dag_id))
    else:
        seen.extra["jobs"] = stage.slurm.job_ids(stage.slurm.job_name(dag_id))
        seen.extra["program_runs"] = len(stage.slurm.program_runs(dag_id))
    return seen


@pytest.mark.scenario("preempt[{platform}-retries-unset]")
@pytest.mark.parametrize("platform", PLATFORMS)
def test_preemption_is_retried_even_without_retries_in_the_dag(seen: TaskOutcome, platform: str) -> None:
    assert (seen.state, seen.try_number) == ("success", 2)
    assert "preemption, retrying with backoff" in seen.log(1)
    assert len(seen.extra["jobs"]) == 2 and seen.extra["program_runs"] == 2  # one fresh job


@pytest.mark.scenario("preempt[{platform}-retries-zero]")
@pytest.mark.parametrize("platform", PLATFORMS)
def test_explicit_zero_retries_wins_over_preemption_retries(seen: TaskOutcome, platform: str) -> None:
    assert (seen.state, seen.try_number) == ("failed", 1)
    assert "preempt" in seen.log(1).lower()
    assert len(seen.extra["jobs"]) == 1 and seen.extra["program_runs"] == 1


@pytest.mark.scenario("preempt[{platform}-retries-unset]")
@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_preempted_and_retried_task_sends_its_metrics(
    seen: TaskOutcome, platform: str, stage: Stage
) -> None:
    """The provider's metrics reach a StatsD server through Airflow's own ``[metrics]`` settings, from
    the task processes and (GKE, deferred) from the triggerer's triggers."""
    assert (seen.state, seen.try_number) == ("success", 2)
    where = {"dag_id": seen.dag_id, "task_id": "train"}
    backend = "gke" if platform == "gke" else "slurm"
    statsd = stage.statsd
    (preempted,) = statsd.wait_for(metrics.PREEMPTIONS.name, 1, **where)
    assert preempted[0]["backend"] == backend and preempted[1:] == (1.0, "c")
    # each try's job ended (GKE: seen by the trigger; Slurm: its EndTime, read when the wait ended)
    ended = statsd.wait_for(metrics.TIME_TO_FINISH.name, 2, **where)
    assert all(kind == "ms" and 0 <= value < 1000 * RUN_TIMEOUT for _, value, kind in ended), ended
    assert statsd.wait_for(metrics.QUEUE_WAIT.name, 1, **where)
    hours = statsd.metrics(metrics.TPU_HOURS.name, **where)
    if platform == "gke":  # the spec's TPU type; each try's chip-hours
        assert {tags["tpu_type"] for tags, _, _ in ended} == {"v5litepod-16"}
        assert len(statsd.wait_for(metrics.TPU_HOURS.name, 2, **where)) == 2
    else:
        assert hours == []  # without its service's slices and their shape: TPU-hours unknown


@pytest.mark.scenario("preempt[{platform}-retries-unset]")
@pytest.mark.parametrize("platform", ["gke", "slurm_rest"])
def test_the_timeline_tab_draws_each_try_and_the_preemption(
    seen: TaskOutcome, stage: Stage, platform: str
) -> None:
    """The *Pathways timeline* plugin on the deployment's API server, in headless Chromium: the run's
    tab lists the view, and the view draws both tries, the first marked preempted, on a time axis;
    a Slurm workload's too (ready from its start, from Slurm's own times)."""
    from playwright.sync_api import sync_playwright

    from tests.support.environment import require
    from tests.ui.support import CHROMIUM, CHROMIUM_ARGS, Screenshots

    require(CHROMIUM.exists(), f"{CHROMIUM} is missing: run sandbox/ui/install.sh (make test does)")
    plugins = stage.airflow.api.get("/api/v2/plugins")["plugins"]
    (plugin,) = [p for p in plugins if p["name"] == "pathways_timeline"]
    assert [view["destination"] for view in plugin["external_views"]] == ["dag_run"]
    base = stage.airflow.deployment.api_url
    screenshots = Screenshots(os.environ.get("PATHWAYS_UI_SCREENSHOTS"))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1100, "height": 700})
            context.add_cookies([{"name": "_token", "value": stage.airflow.api.token(), "url": base}])
            page = context.new_page()
            page.goto(f"{base}/pathways/timeline?{urlencode({'dag_id': seen.dag_id, 'run_id': seen.run_id})}")
            tries = page.locator("g[data-task='train']")
            assert tries.count() == 2
            first, second = tries.nth(0), tries.nth(1)
            assert (first.get_attribute("data-try"), first.get_attribute("data-preempted")) == ("1", "true")
            assert (second.get_attribute("data-state"), second.get_attribute("data-preempted")) == (
                "success",
                "false",
            )
            assert second.locator("rect[data-phase='try']").count() == 1
            # It was ready, then done: even when another scenario's triggerer restart moved its
            # trigger and the new one first saw the job at its end, the JobSet's conditions
            # recorded its readiness (StartupPolicyCompleted) and end; a Slurm workload is ready
            # from its start to its end, as Slurm recorded them.
            assert second.locator("rect[data-phase='ready']").count() == 1
            assert page.locator("g[data-tick]").count() >= 2  # a time axis with ticks
            assert "try 2: success" in (second.locator("rect[data-phase='try'] title").text_content() or "")
            if platform == "gke":  # its one slice's readiness over time, as seen (or as recorded)
                slices = second.locator("polyline[data-phase='slices']")
                assert slices.count() == 1 and (slices.get_attribute("data-counts") or "").endswith("1")
            screenshots.take(page, f"pathways-timeline-{platform}")
            # without a session the view refuses: it shows what the DAG's task instances show
            anonymous = browser.new_context().new_page()
            response = anonymous.goto(f"{base}/pathways/timeline?dag_id={seen.dag_id}&run_id=x")
            assert response is not None and response.status in (401, 403)
        finally:
            browser.close()

"""The sweep's rule (airflow_provider_pathways.sweep): which active job a sweep ends, by its task
instance's state (the states of airflow-core's ``TaskInstanceState``) and what its task leaves
running; the marks a GKE job carries for it."""

from __future__ import annotations

import pytest

from airflow_provider_pathways.gke.task_job import (
    DEPLOYMENT_LABEL,
    LEFT_RUNNING_ANNOTATION,
    TASK_INSTANCE_ANNOTATION,
    TaskIdentity,
    carries_owner_labels,
    deployment_of,
    left_running_of,
    owner_labels,
    owner_selector,
    place_spec,
    task_instance_of,
)
from airflow_provider_pathways.operators.pathways_job import PathwaysJobOperator
from airflow_provider_pathways.operators.sweep import PathwaysJobSweepOperator
from airflow_provider_pathways.slurm.job import (
    comment_owner,
    comment_role,
    followed_by_try,
    following_comment,
    marked_comment,
    owner_words,
    parse_scontrol_record,
    task_instance_marker,
)
from airflow_provider_pathways.sweep import (
    SweptJob,
    Verdict,
    deployment_name,
    judge,
    left_running_when,
    report,
)
from airflow_provider_pathways.task_instance_state import A_TRY_FOLLOWS, NOT_FOUND
from tests.dags.gke_scenarios import spec

DEFAULT_POLICY = left_running_when(hands_on=False, ends_on_kill=True, ends_on_failure=True)


@pytest.mark.parametrize("state", sorted(A_TRY_FOLLOWS))
def test_a_job_a_try_follows_or_will_follow_is_kept(state: str) -> None:
    assert judge(state, DEFAULT_POLICY)[0] is Verdict.KEEP


def test_a_cleared_task_instance_keeps_its_job_for_the_next_try() -> None:
    """No state: cleared; the scheduler starts a new try, which reattaches or ends it per the clear
    rules."""
    verdict, reason = judge(None, DEFAULT_POLICY)
    assert verdict is Verdict.KEEP and "cleared" in reason


@pytest.mark.parametrize("state", ["failed", "success", "skipped", "upstream_failed", "removed", NOT_FOUND])
def test_a_job_of_an_ended_or_gone_task_instance_is_ended(state: str) -> None:
    assert judge(state, DEFAULT_POLICY)[0] is Verdict.END


def test_what_the_task_leaves_running_is_kept() -> None:
    handed_on = left_running_when(hands_on=True, ends_on_kill=True, ends_on_failure=True)
    kept_on_kill = left_running_when(hands_on=False, ends_on_kill=False, ends_on_failure=True)
    kept_failed = left_running_when(hands_on=False, ends_on_kill=True, ends_on_failure=False)
    assert handed_on == {"success"} and kept_failed == {"failed"}
    assert kept_on_kill == {"failed", "success", "skipped"}
    assert judge("success", handed_on)[0] is Verdict.KEEP
    assert judge("failed", handed_on)[0] is Verdict.END
    assert judge("failed", kept_failed)[0] is Verdict.KEEP
    assert judge(NOT_FOUND, kept_on_kill)[0] is Verdict.END  # a deleted run is not a kill


def test_a_job_of_a_dag_with_no_run_here_is_kept() -> None:
    """Its task instance is not found, and its DAG has no run in this deployment: another Airflow
    deployment sharing the namespace or Slurm user may follow it."""
    verdict, reason = judge(NOT_FOUND, DEFAULT_POLICY, dag_has_runs=False)
    assert verdict is Verdict.KEEP and "another Airflow deployment" in reason


def test_a_job_that_names_no_policy_is_kept() -> None:
    verdict, reason = judge("failed", None)
    assert verdict is Verdict.KEEP and "end it by hand" in reason


def test_a_placed_job_names_its_task_instance_exactly_and_its_policy() -> None:
    """Labels hold safe values only (a run id's ``:`` and ``+`` become a hash): the annotation holds
    the task instance as Airflow names it."""
    task = TaskIdentity("dag", "train", "scheduled__2026-12-06T00:00:00+00:00", 3)
    placed = place_spec(
        spec(), task, name=None, namespace="ns", labels={}, annotations={}, left_running={"success"}
    )
    job = placed.to_pathwaysjob()
    assert task_instance_of(job) == task
    assert left_running_of(job) == {"success"}
    assert job["metadata"]["annotations"][LEFT_RUNNING_ANNOTATION] == "success"
    # the user's annotations cannot stand for another task instance
    forged = place_spec(
        spec(), task, name=None, namespace="ns", labels={}, annotations={TASK_INSTANCE_ANNOTATION: "{}"}
    )
    assert task_instance_of(forged.to_pathwaysjob()) == task


@pytest.mark.parametrize("text", [None, "", "{}", "not json", '{"dag_id": "d"}', "[1]"])
def test_an_unreadable_task_instance_annotation_names_none(text: str | None) -> None:
    assert TaskIdentity.from_annotation(text) is None


@pytest.mark.parametrize(
    ("wait_until", "delete_on", "left"),
    [
        ("finished", ("success", "failure", "kill"), set()),
        ("ready", ("failure", "kill"), {"success"}),
        ("created", ("failure",), {"success", "failed", "skipped"}),
        ("finished", ("success", "kill"), {"failed"}),
    ],
)
def test_the_operator_names_what_it_leaves_running(
    wait_until: str, delete_on: tuple[str, ...], left: set[str]
) -> None:
    task = PathwaysJobOperator(task_id="t", job=spec(), wait_until=wait_until, delete_on=delete_on)
    assert task.left_running_when() == left


def test_the_sweep_operator_takes_one_namespace_or_several() -> None:
    assert PathwaysJobSweepOperator(task_id="s", namespaces="a").swept_namespaces() == ["a"]
    assert PathwaysJobSweepOperator(task_id="s", namespaces=["a", "b"]).swept_namespaces() == ["a", "b"]
    with pytest.raises(TypeError, match="namespaces: expected a name or a list of names"):
        PathwaysJobSweepOperator(task_id="s", namespaces=["a", 3]).swept_namespaces()  # type: ignore[list-item]


def test_the_report_names_each_job_its_task_instance_and_what_became_of_it() -> None:
    rows = [
        SweptJob.judged(
            "GKE", "PathwaysJob ns/a", ("dag", "t", "run", -1), "failed", frozenset()
        ).with_outcome("ended"),
        SweptJob.judged("GKE", "PathwaysJob ns/b", ("dag", "t", "run", 2), "running", frozenset()),
    ]
    lines = report(rows).splitlines()
    assert lines[0].split() == ["OUTCOME", "JOB", "TASK", "INSTANCE", "STATE", "WHY"]
    assert lines[1].split()[:5] == ["ended", "PathwaysJob", "ns/a", "dag.t", "run"]
    assert "dag.t[2] run" in lines[2] and lines[2].startswith("kept")
    assert lines[-1] == "1 ended, 1 kept"
    assert report([]) == "No active job of this provider found."


def test_the_sweep_command_runs_as_a_module_where_airflow_loads_no_providers_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Airflow's CLI loads providers' commands from 3.2 (``ProvidersManager._discover_cli_command``);
    before, ``python -m airflow_provider_pathways.cli`` takes the same arguments."""
    from airflow_provider_pathways.cli import get_cli_commands, main
    from airflow_provider_pathways.provider_info import get_provider_info

    assert get_provider_info()["cli"] == ["airflow_provider_pathways.cli.get_cli_commands"]
    (group,) = get_cli_commands()
    assert group.name == "pathways" and [c.name for c in group.subcommands] == ["sweep-gke", "sweep-slurm"]
    with pytest.raises(SystemExit) as done:
        main(["sweep-gke", "--help"])
    assert done.value.code == 0
    usage = capsys.readouterr().out
    assert all(flag in usage for flag in ("--conn-id", "--namespace", "--dry-run"))


def test_a_slurm_comment_names_the_task_instance_but_keeps_its_run_id_off_the_cluster() -> None:
    """Every cluster user sees comments: the run is found by the marker's digest; dag and task ids
    hold no spaces (airflow-core's ``KEY_REGEX``), so the words split cleanly."""
    marker = task_instance_marker("serving", "start_pathways", "scheduled__2026-12-06T00:00:00+00:00", -1)
    owner = owner_words("serving", "start_pathways", None, {"success"})
    comment = following_comment(marker, 2, "pathways-service", owner)
    assert "scheduled__" not in comment
    found = comment_owner(comment)
    assert found is not None
    assert (found.dag_id, found.task_id, found.map_index, found.left_running) == (
        "serving",
        "start_pathways",
        -1,
        {"success"},
    )
    assert found.is_run("scheduled__2026-12-06T00:00:00+00:00") and not found.is_run("manual__other")
    assert followed_by_try(comment, marker) == 2 and comment_role(comment) == "pathways-service"
    # what an earlier version wrote names no owner: a sweep leaves such a job alone
    assert comment_owner(marked_comment(marker, "job", 1)) is None
    assert comment_owner("dag=a task=b map=-1") is None  # not this provider's marker


def test_scontrol_reads_back_the_comment_with_its_owner_words() -> None:
    """``scontrol -o show job`` prints the comment unquoted: only its own keys end a free-text value."""
    marker = task_instance_marker("d", "t", "r", 3)
    comment = marked_comment(marker, "job", 1, owner_words("d.x", "t-1", 3, set()))
    line = f"JobId=7 JobName=d.t UserId=pathways(1000) JobState=RUNNING Comment={comment} StdOut=/tmp/o"
    fields = parse_scontrol_record(line)
    assert fields["Comment"] == comment and fields["StdOut"] == "/tmp/o"
    found = comment_owner(fields["Comment"])
    assert found is not None and (found.dag_id, found.task_id, found.map_index) == ("d.x", "t-1", 3)
    assert found.left_running == frozenset()


def test_another_deployments_job_is_kept_whatever_the_task_instance_here_says() -> None:
    """Two deployments sharing a Slurm user or a namespace run DAGs of the same ids, with the same
    run ids for scheduled runs: a job carries its deployment's ``[pathways] deployment_name``, and a
    sweep judges only its own deployment's jobs."""
    assert judge("failed", frozenset(), deployments=("staging", "prod")) == (
        Verdict.KEEP,
        "it is another Airflow deployment's (staging; this one is prod)",
    )
    assert judge(NOT_FOUND, frozenset(), deployments=("", "prod"))[0] is Verdict.KEEP  # unnamed: not ours
    assert judge(NOT_FOUND, frozenset(), deployments=("prod", "prod"))[0] is Verdict.END
    words = owner_words("train", "service", None, {"success"}, "prod")
    assert words == "dag=train task=service map=-1 keep=success dep=prod"
    owner = comment_owner(f"{task_instance_marker('train', 'service', 'r', None)} role=job try=1 {words}")
    assert owner is not None and owner.deployment == "prod"
    assert comment_owner(f"airflow-task-instance=x {owner_words('d', 't', 0, ())}").deployment == ""  # type: ignore[union-attr]
    task = TaskIdentity("train", "service", "r", -1)
    placed = place_spec(spec(), task, name="x", namespace="ml", labels={}, annotations={}, deployment="prod")
    assert deployment_of(placed.to_pathwaysjob()) == "prod"
    unnamed = place_spec(spec(), task, name="x", namespace="ml", labels={}, annotations={})
    assert deployment_of(unnamed.to_pathwaysjob()) == ""


def test_a_named_deployment_finds_only_its_own_jobs_and_an_unnamed_one_what_it_always_found() -> None:
    """A later try finds its task instance's job by the Slurm marker, or on GKE by the default name
    and the owner labels: deployments sharing a Slurm user or a namespace with the same DAG ids (the
    same run ids of scheduled runs) must not take each other's jobs for their own. A named deployment
    is part of the marker, the name's digest and the owner labels; an unnamed one's are what earlier
    versions wrote, so a job submitted before an upgrade is still found."""
    run = "scheduled__2026-12-01T00:00:00+00:00"
    unnamed = task_instance_marker("d", "t", run, 3)
    assert task_instance_marker("d", "t", "r", 3) == "airflow-task-instance=7bbd0134b1da58fd5da2086b"
    prod, staging = (task_instance_marker("d", "t", run, 3, name) for name in ("prod", "staging"))
    assert len({unnamed, prod, staging}) == 3
    owner = comment_owner(f"{prod} role=job {owner_words('d', 't', 3, {'success'}, 'prod')}")
    assert owner is not None and owner.is_run(run) and not owner.is_run("manual__other")

    task = TaskIdentity("dag", "train", run, -1)
    assert task.default_name() == "train-g7263c4p"  # as before deployments were named
    placed = {
        name: place_spec(spec(), task, name=None, namespace="ml", labels={}, annotations={}, deployment=name)
        for name in ("", "prod", "staging")
    }
    assert len({p.name for p in placed.values()}) == 3 and placed[""].name == "train-g7263c4p"
    owners = {name: owner_labels(p.labels) for name, p in placed.items()}
    assert owners["prod"] == {**owners[""], DEPLOYMENT_LABEL: "prod"}
    jobs = {name: p.to_pathwaysjob() for name, p in placed.items()}
    for mine in placed:
        for theirs in placed:
            assert carries_owner_labels(jobs[theirs], owners[mine]) is (mine == theirs), (mine, theirs)
    # the selector a try lists its jobs with says the same (the API server's label selector syntax)
    assert owner_selector(owners[""]).endswith(f",!{DEPLOYMENT_LABEL}")
    assert f"{DEPLOYMENT_LABEL}=prod" in owner_selector(owners["prod"]).split(",")


@pytest.mark.parametrize("name", ["prod staging", "-prod", "a" * 64, "prod/1"])
def test_a_deployment_name_that_is_not_one_word_is_refused_naming_the_option(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__PATHWAYS__DEPLOYMENT_NAME", name)
    with pytest.raises(ValueError, match=r"\[pathways\] deployment_name: .* is not one word"):
        deployment_name()
    monkeypatch.setenv("AIRFLOW__PATHWAYS__DEPLOYMENT_NAME", "composer-prod.eu_1")
    assert deployment_name() == "composer-prod.eu_1"

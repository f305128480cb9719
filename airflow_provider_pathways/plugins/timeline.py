"""The Airflow UI plugin (Airflow 3's plugin interface: a FastAPI app and an external view) that
shows a DAG run's Pathways timeline (:mod:`~airflow_provider_pathways.plugins.timeline_chart`) as a tab of
the run: ``/pathways/timeline?dag_id=...&run_id=...`` on the API server.

It reads what the run recorded: each task's tries (task instance and its history) and the XComs
the operators push (``tpu_hours``: each try's job milestones; ``cleanup_report``: the cache
cleanups). A user sees it only with read access to the DAG's task instances.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_pathways.plugins.timeline_chart import CacheRow, RunTimeline, TryRow, tries_from_xcom
from airflow_provider_pathways.tpu_hours import TPU_HOURS_KEY

#: Where the app is mounted on the API server.
URL_PREFIX = "/pathways"
CLEANUP_REPORT_KEY = "cleanup_report"


def _epoch(moment: Any) -> float | None:
    return moment.timestamp() if moment is not None else None


def read_run(dag_id: str, run_id: str) -> RunTimeline:
    """The run's tries and cache cleanups, from the metadata database."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        xcoms = session.scalars(
            select(XComModel).where(
                XComModel.dag_id == dag_id,
                XComModel.run_id == run_id,
                XComModel.key.in_((TPU_HOURS_KEY, CLEANUP_REPORT_KEY)),
            )
        ).all()
        values = {(x.task_id, x.map_index, x.key): XComModel.deserialize_value(x) for x in xcoms}
        attempts: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for model in (TaskInstanceHistory, TaskInstance):
            for task_id, map_index, try_number, state, start, end in session.execute(
                select(
                    model.task_id,
                    model.map_index,
                    model.try_number,
                    model.state,
                    model.start_date,
                    model.end_date,
                ).where(model.dag_id == dag_id, model.run_id == run_id)
            ):
                attempts.setdefault((task_id, map_index), []).append(
                    {
                        "try_number": try_number,
                        "state": str(getattr(state, "value", state) or ""),
                        "start": _epoch(start),
                        "end": _epoch(end),
                    }
                )
    tries: list[TryRow] = []
    caches: list[CacheRow] = []
    for (task_id, map_index, key), value in sorted(values.items()):
        name = task_id if map_index < 0 else f"{task_id}[{map_index}]"
        if key == TPU_HOURS_KEY:
            seen = {a["try_number"]: a for a in attempts.get((task_id, map_index), [])}
            tries.extend(tries_from_xcom(name, value, seen.values()))
        elif isinstance(value, dict):
            caches.append(
                CacheRow(
                    task=name,
                    bytes_freed=int(value.get("deleted_bytes") or 0),
                    objects_freed=int(value.get("deleted_objects") or 0),
                    dry_run=bool(value.get("dry_run")),
                )
            )
    return RunTimeline(dag_id, run_id, tuple(tries), tuple(caches))


def create_app() -> Any:
    """The FastAPI app: ``GET /timeline`` (HTML), behind Airflow's authentication and DAG access."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends, FastAPI
    from fastapi.responses import HTMLResponse

    from airflow_provider_pathways.plugins.timeline_chart import render_page

    app = FastAPI(title="Pathways timeline")

    @app.get(
        "/timeline",
        response_class=HTMLResponse,
        dependencies=[Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))],
    )
    def timeline(dag_id: str, run_id: str) -> str:
        return render_page(read_run(dag_id, run_id))

    return app


@cache
def _fastapi_apps() -> list[dict[str, Any]]:
    """The app where this Airflow's API server can serve it behind its DAG access checks (3.0+)."""
    try:
        app = create_app()
    except ImportError:
        return []
    return [{"app": app, "url_prefix": URL_PREFIX, "name": "Pathways timeline"}]


class _BuiltWhenRead:
    """``fastapi_apps``, built when Airflow reads it (the API server), not when a process that only
    loads plugins (a task, the scheduler) imports this module."""

    def __get__(self, instance: object, owner: type) -> list[dict[str, Any]]:
        return _fastapi_apps()


class PathwaysTimelinePlugin(AirflowPlugin):
    """The *Pathways timeline* tab of a DAG run (Airflow 3.1+; Airflow 3.0 serves the page only)."""

    name = "pathways_timeline"
    fastapi_apps = _BuiltWhenRead()  # type: ignore[assignment]
    external_views = [
        {
            "name": "Pathways timeline",
            "href": f"{URL_PREFIX}/timeline?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
            "destination": "dag_run",
            "url_route": "pathways_timeline",
        }
    ]

"""A real Airflow deployment on one machine: PostgreSQL, api-server, scheduler (LocalExecutor, or
CeleryExecutor with Redis as broker and Celery workers), dag-processor and several triggerers, each
its own process with its own log file. On Airflow 2 the webserver serves the REST API v1 (basic
auth of a FAB user) in the api-server's place, and the dag-processor runs standalone as in 3.

``AirflowDeployment(base_dir, dag_files, connections).start()`` writes ``AIRFLOW_HOME/airflow.cfg``,
copies the DAG files into ``AIRFLOW_HOME/dags``, starts PostgreSQL, runs ``airflow db migrate``, then
starts the components and waits (with deadlines) until the API answers, the scheduler, the
dag-processor and every triggerer have heartbeated. ``stop()`` ends every process it started (and
their children: executor workers, task and trigger-runner processes) and stops PostgreSQL, also
after a failed start. Intervals are short so that lost heartbeats are noticed within seconds.

With ``executor="CeleryExecutor"`` the deployment also runs Redis (the broker; PostgreSQL keeps the
Celery results) and ``celery_workers`` workers. Each worker is a host of its own to Airflow: its
own Celery node name and the hostname its task instances record (``celery-worker-<n>``), its own
port for the worker log server. They share one log folder, as the api-server reads the logs of
every worker from it (on separate machines it fetches them from each worker's log server).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import IO, Any

import psutil

from sandbox import registry
from sandbox.airflow.api import AirflowApi, AirflowApiError
from sandbox.airflow.postgres import Postgres, free_port, start_postgres
from sandbox.airflow.redis_server import Redis, start_redis

REPO_ROOT = Path(__file__).resolve().parents[2]
ADMIN_USER = "admin"
CELERY = "CeleryExecutor"
#: The module (in ``AIRFLOW_HOME/config``, on every Airflow process's path) that names a worker's host.
HOSTNAME_MODULE = "deployment_hostname"
HOSTNAME_ENV = "PATHWAYS_DEPLOYMENT_HOSTNAME"
AIRFLOW_2 = int(version("apache-airflow").split(".")[0]) < 3
#: Options of Airflow 3 that Airflow 2 knows by another name (Airflow 3's ``deprecated_options``,
#: read the other way round); ``None``: Airflow 2 has no such option.
AIRFLOW_2_OPTIONS: dict[tuple[str, str], tuple[str, str] | None] = {
    ("api", "host"): ("webserver", "web_server_host"),
    ("api", "port"): ("webserver", "web_server_port"),
    ("api", "base_url"): ("webserver", "base_url"),
    ("api", "workers"): ("webserver", "workers"),
    ("api", "secret_key"): ("webserver", "secret_key"),
    ("scheduler", "task_instance_heartbeat_timeout"): ("scheduler", "scheduler_zombie_task_threshold"),
    ("scheduler", "task_instance_heartbeat_timeout_detection_interval"): (
        "scheduler",
        "zombie_detection_interval",
    ),
    # Airflow 3's deprecated name for it, but Airflow 2's LocalTaskJob also takes a value of 1 or more
    # as its time limit: a task whose heartbeat is that late (a loaded machine) is sent SIGTERM by its
    # own supervisor ("Heartbeat time limit exceeded!", jobs/local_task_job_runner.py). Left at its
    # default (0: the limit is the zombie threshold; heartbeats every job_heartbeat_sec, 5 s).
    ("workers", "min_heartbeat_interval"): None,
    ("dag_processor", "refresh_interval"): ("scheduler", "dag_dir_list_interval"),
    ("dag_processor", "min_file_process_interval"): ("scheduler", "min_file_process_interval"),
    ("dag_processor", "print_stats_interval"): ("scheduler", "print_stats_interval"),
    ("dag_processor", "dag_file_processor_timeout"): ("core", "dag_file_processor_timeout"),
    ("core", "execution_api_server_url"): None,
    ("core", "simple_auth_manager_users"): None,
    ("core", "simple_auth_manager_passwords_file"): None,
    ("database", "sql_alchemy_conn_async"): None,
    ("api_auth", "jwt_secret"): None,
    ("api_auth", "jwt_issuer"): None,
}


class AirflowDeploymentError(RuntimeError):
    """A component did not start or did not become healthy in time."""


@dataclass
class Timings:
    """Intervals of the deployment, in seconds."""

    task_heartbeat_timeout: int = 30
    task_heartbeat_detection: float = 2.0
    worker_heartbeat: int = 3
    scheduler_heartbeat: int = 2
    triggerer_heartbeat: int = 1
    triggerer_health_threshold: int = 10
    dag_refresh: int = 5
    min_file_process: int = 120


@dataclass
class Component:
    """One Airflow process (``airflow <command>``) with its log file."""

    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    on_start: Any = field(default=None, repr=False)
    record: registry.Record | None = field(default=None, repr=False)
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> None:
        if self.alive():
            raise AirflowDeploymentError(f"{self.name} is already running (pid {self.pid})")
        self.close_log()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - kept open while the process runs
        self._log.write(f"\n===== start {self.starts + 1} of {self.name}: {' '.join(self.args)}\n".encode())
        self._log.flush()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "airflow", *self.args],
            cwd=self.log_path.parent,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.starts += 1
        # Machine-wide: stopped by the next sandbox start if this process dies without stopping it.
        self.record = registry.register(
            "airflow",
            self.process.pid,
            description=f"Airflow {self.name}",
            state_dir=self.log_path.parent,
            owner=os.getpid(),
        )
        if self.on_start is not None:
            self.on_start()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def descendants(self) -> list[psutil.Process]:
        if not self.alive() or self.pid is None:
            return []
        with contextlib.suppress(psutil.Error):
            return psutil.Process(self.pid).children(recursive=True)
        return []

    def cpu_seconds(self) -> float:
        """CPU time used so far by the process and the processes it started (finished ones included
        once their parent has reaped them)."""
        total = 0.0
        if self.pid is None or not self.alive():
            return total
        with contextlib.suppress(psutil.Error):
            for proc in [psutil.Process(self.pid), *self.descendants()]:
                with contextlib.suppress(psutil.Error):
                    t = proc.cpu_times()
                    total += t.user + t.system + t.children_user + t.children_system
        return total

    def kill(self) -> None:
        """SIGKILL the process and everything it started, at once (a machine that dies)."""
        if self.process is None:
            return
        victims = self.descendants()
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        _kill_all(victims)
        self.process.wait(30)
        registry.unregister(self.record)

    def terminate(self, timeout: float) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; children too."""
        if self.process is None:
            return
        victims = self.descendants()
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        _kill_all(victims)
        registry.unregister(self.record)
        self.close_log()

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


def _kill_all(processes: Iterable[psutil.Process]) -> None:
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(list(processes), timeout=10)


def _as_airflow_2(sections: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The same configuration in Airflow 2's words: renamed options, the webserver's REST API v1 with
    basic auth (and XCom values as JSON), the dag-processor standalone."""
    out: dict[str, dict[str, Any]] = {}
    for section, options in sections.items():
        for key, value in options.items():
            target = AIRFLOW_2_OPTIONS.get((section, key), (section, key))
            if target is not None:
                out.setdefault(target[0], {})[target[1]] = value
    out.setdefault("api", {}).update(
        {"auth_backends": "airflow.api.auth.backend.basic_auth", "enable_xcom_deserialize_support": "True"}
    )
    out["webserver"]["warn_deployment_exposure"] = "False"
    out["scheduler"]["standalone_dag_processor"] = "True"
    return out


def _ini(sections: Mapping[str, Mapping[str, Any]]) -> str:
    out: list[str] = []
    for section, options in sections.items():
        out.append(f"[{section}]")
        out.extend(f"{key} = {value}" for key, value in options.items())
        out.append("")
    return "\n".join(out)


class AirflowDeployment:
    """PostgreSQL plus api-server, scheduler, dag-processor and ``triggerers`` triggerer processes;
    with the CeleryExecutor also Redis and ``celery_workers`` Celery workers."""

    def __init__(
        self,
        base_dir: Path,
        dag_files: Iterable[Path],
        *,
        connections: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        parallelism: int = 8,
        triggerers: int = 2,
        api_workers: int = 2,
        timings: Timings | None = None,
        executor: str = "LocalExecutor",
        celery_workers: int = 2,
        worker_concurrency: int = 4,
    ) -> None:
        self.base_dir = Path(base_dir).resolve()
        self.home = self.base_dir / "airflow-home"
        self.dags_folder = self.home / "dags"
        self.logs_dir = self.base_dir / "process-logs"
        self.dag_files = [Path(p) for p in dag_files]
        self.connections = dict(connections or {})
        self.extra_env = dict(env or {})
        self.parallelism = parallelism
        self.triggerer_count = triggerers
        self.api_workers = api_workers
        self.timings = timings or Timings()
        self.executor = executor
        self.celery_worker_count = celery_workers if executor == CELERY else 0
        self.worker_concurrency = worker_concurrency
        self.redis: Redis | None = None
        self.api_port = free_port()
        self.password = secrets.token_urlsafe(12)
        self.postgres: Postgres | None = None
        self.components: dict[str, Component] = {}
        self.triggerer_job_ids: dict[int, int] = {}
        self._api: AirflowApi | None = None
        self._engine: Any = None
        self._watchdog_state = self.base_dir / "watchdog.json"

    # ---- configuration ------------------------------------------------------------------------

    @property
    def driver(self) -> str:
        """The PostgreSQL driver of Airflow's SQLAlchemy: psycopg 3 from SQLAlchemy 2 on (Airflow
        3.1+), psycopg2 before (Airflow 2.11 and 3.0 run SQLAlchemy 1.4)."""
        return "psycopg" if self._sqlalchemy_2 else "psycopg2"

    @property
    def async_driver(self) -> str:
        """psycopg 3 from SQLAlchemy 2 on; asyncpg before (SQLAlchemy 1.4 has no async psycopg)."""
        return "psycopg" if self._sqlalchemy_2 else "asyncpg"

    @property
    def _sqlalchemy_2(self) -> bool:
        import sqlalchemy

        return int(sqlalchemy.__version__.split(".")[0]) >= 2

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def api(self) -> AirflowApi:
        if self._api is None:
            self._api = AirflowApi(
                self.api_url, ADMIN_USER, self.password, version="v1" if AIRFLOW_2 else "v2"
            )
        return self._api

    def config(self) -> dict[str, dict[str, Any]]:
        """The contents of ``airflow.cfg``."""
        assert self.postgres is not None
        t = self.timings
        sections = self._config(t)
        if AIRFLOW_2:
            sections = _as_airflow_2(sections)
        if self.executor == CELERY:
            assert self.redis is not None
            sections["celery"] = {
                "broker_url": self.redis.url(),
                "result_backend": "db+" + self.postgres.url(self.driver),
                "worker_concurrency": self.worker_concurrency,
                "sync_parallelism": 2,
            }
        return sections

    def _config(self, t: Timings) -> dict[str, dict[str, Any]]:
        assert self.postgres is not None
        return {
            "core": {
                "dags_folder": self.dags_folder,
                "executor": self.executor,
                "parallelism": self.parallelism,
                "max_active_tasks_per_dag": 64,
                "max_active_runs_per_dag": 4,
                "load_examples": "False",
                "dags_are_paused_at_creation": "True",
                "execution_api_server_url": f"{self.api_url}/execution/",
                "simple_auth_manager_users": f"{ADMIN_USER}:admin",
                "simple_auth_manager_passwords_file": self.home / "simple_auth_manager_passwords.json",
                "min_serialized_dag_update_interval": 5,
                # a task parses its DAG file again when it starts: that took up to 30 s under load
                "dagbag_import_timeout": 120,
                "unit_test_mode": "False",
            },
            "database": {
                "sql_alchemy_conn": self.postgres.url(self.driver),
                "sql_alchemy_conn_async": self.postgres.url(self.async_driver),
                # every running task heartbeats through the API server: dozens of requests at once
                "sql_alchemy_pool_size": 10,
                "sql_alchemy_max_overflow": 60,
            },
            "api": {
                "host": "127.0.0.1",
                "port": self.api_port,
                "base_url": self.api_url,
                "workers": self.api_workers,
                "secret_key": secrets.token_urlsafe(24),
            },
            # an issuer: Airflow 3.0 passes None when unset, which PyJWT 2.10+ refuses
            "api_auth": {"jwt_secret": secrets.token_urlsafe(32), "jwt_issuer": "airflow-deployment"},
            "scheduler": {
                "task_instance_heartbeat_timeout": t.task_heartbeat_timeout,
                "task_instance_heartbeat_timeout_detection_interval": t.task_heartbeat_detection,
                "job_heartbeat_sec": t.scheduler_heartbeat,
                "scheduler_heartbeat_sec": t.scheduler_heartbeat,
                "scheduler_idle_sleep_time": 0.5,
                # Every 5 minutes the scheduler resets the tasks of any scheduler whose heartbeat is
                # older than this, its own included: on a saturated 2-core machine its loop stalls
                # for over 30 s and it reset every running task of the suite. No scenario stops it.
                "scheduler_health_check_threshold": 300,
                "trigger_timeout_check_interval": 5,
            },
            "triggerer": {
                "job_heartbeat_sec": t.triggerer_heartbeat,
                "triggerer_health_check_threshold": t.triggerer_health_threshold,
            },
            "workers": {"min_heartbeat_interval": t.worker_heartbeat},
            "dag_processor": {
                "refresh_interval": t.dag_refresh,
                "min_file_process_interval": t.min_file_process,
                "print_stats_interval": 600,
                "dag_file_processor_timeout": 150,
            },
            "logging": {
                "base_log_folder": self.home / "logs",
                "dag_processor_child_process_log_directory": self.home / "logs" / "dag_processor",
                "worker_log_server_port": free_port(),
                "trigger_log_server_port": free_port(),
                "logging_level": "INFO",
            },
            "operators": {"default_deferrable": "False"},
        }

    def environment(self) -> dict[str, str]:
        """Environment of every Airflow process: none of the caller's ``AIRFLOW*`` settings leak in."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PATHWAYS_TEST_"))}
        env.update(self.extra_env)
        env["AIRFLOW_HOME"] = str(self.home)
        env["AIRFLOW_CONFIG"] = str(self.home / "airflow.cfg")
        env["PYTHONUNBUFFERED"] = "1"
        for conn_id, value in self.connections.items():
            env[f"AIRFLOW_CONN_{conn_id.upper()}"] = value
        return env

    def _prepare_home(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.dags_folder.mkdir(exist_ok=True)
        for path in self.dag_files:
            shutil.copy2(path, self.dags_folder / path.name)
        (self.home / "airflow.cfg").write_text(_ini(self.config()))
        passwords = self.home / "simple_auth_manager_passwords.json"
        passwords.write_text(json.dumps({ADMIN_USER: self.password}))
        passwords.chmod(0o600)
        if self.celery_worker_count:
            (self.home / "config").mkdir(exist_ok=True)
            (self.home / "config" / f"{HOSTNAME_MODULE}.py").write_text(
                f'"""The host a Celery worker of this deployment stands for."""\n\nimport os\n\n\n'
                f"def hostname() -> str:\n    return os.environ[{HOSTNAME_ENV!r}]\n"
            )

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self, timeout: float = 240.0) -> AirflowDeployment:
        """Start everything and wait until it is healthy; on failure stop what started, then raise."""
        try:
            self._start(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, deadline: float) -> None:
        if importlib.util.find_spec(self.driver) is None:
            raise AirflowDeploymentError(
                f"the PostgreSQL driver {self.driver} is missing: the test extra installs it"
            )
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.postgres = start_postgres()
        if self.executor == CELERY:
            self.redis = start_redis(self.base_dir / "redis")
        self._start_watchdog()
        self._prepare_home()
        migrate = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=max(deadline - time.monotonic(), 30),
            check=False,
        )
        (self.logs_dir / "db-migrate.log").write_text(migrate.stdout + migrate.stderr)
        if migrate.returncode != 0:
            output = migrate.stdout[-3000:] + migrate.stderr[-3000:]
            raise AirflowDeploymentError(f"airflow db migrate failed ({migrate.returncode}):\n{output}")
        env = self.environment()
        if AIRFLOW_2:
            self._create_admin(deadline)
            self._add(
                "webserver", ["webserver", "--port", str(self.api_port), "--hostname", "127.0.0.1"], env
            )
        else:
            self._add("api-server", ["api-server", "--port", str(self.api_port), "--host", "127.0.0.1"], env)
        self._add("scheduler", ["scheduler"], env)
        self._add("dag-processor", ["dag-processor"], env)
        for component in self.components.values():
            component.start()
        self._wait(deadline, "the API server", self._api_up)
        self._wait(deadline, "the scheduler and dag-processor heartbeats", self._core_healthy)
        for n in range(1, self.triggerer_count + 1):
            self.start_triggerer(n, deadline=deadline)
        for n in range(1, self.celery_worker_count + 1):
            self.start_celery_worker(n, deadline=deadline)

    def _create_admin(self, deadline: float) -> None:
        """Airflow 2: the FAB user the REST API v1 calls authenticate as."""
        user = ["--role", "Admin", "--username", ADMIN_USER, "--password", self.password]
        names = ["--firstname", "Deployment", "--lastname", "Admin", "--email", "admin@example.com"]
        created = subprocess.run(
            [sys.executable, "-m", "airflow", "users", "create", *user, *names],
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=max(deadline - time.monotonic(), 30),
            check=False,
        )
        if created.returncode != 0:
            output = (created.stdout[-3000:] + created.stderr[-3000:]).replace(self.password, "***")
            raise AirflowDeploymentError(f"airflow users create failed ({created.returncode}):\n{output}")

    def _add(self, name: str, args: list[str], env: dict[str, str]) -> Component:
        component = Component(name, args, self.logs_dir / f"{name}.log", env, on_start=self._record)
        self.components[name] = component
        return component

    def _start_watchdog(self) -> None:
        """A detached process that stops everything if this process dies without calling ``stop()``."""
        self._record()
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sandbox.airflow.watchdog",
                "--owner",
                str(os.getpid()),
                "--state",
                str(self._watchdog_state),
            ],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _record(self) -> None:
        """Write what the watchdog must stop: the components' processes and PostgreSQL."""
        processes = []
        for component in self.components.values():
            if component.alive() and component.pid is not None:
                with contextlib.suppress(psutil.Error):
                    processes.append([component.pid, psutil.Process(component.pid).create_time()])
        if self.redis is not None and self.redis.process.poll() is None:
            with contextlib.suppress(psutil.Error):
                processes.append([self.redis.pid, psutil.Process(self.redis.pid).create_time()])
        postgres = None
        if self.postgres is not None:
            postgres = {
                "bin_dir": str(self.postgres.bin_dir),
                "data_dir": str(self.postgres.data_dir),
                "run_as": self.postgres.run_as,
            }
        tmp = self._watchdog_state.with_suffix(".tmp")
        tmp.write_text(json.dumps({"processes": processes, "postgres": postgres}))
        tmp.replace(self._watchdog_state)

    def triggerer(self, n: int) -> Component:
        return self.components[f"triggerer-{n}"]

    def start_triggerer(self, n: int, *, deadline: float | None = None) -> int:
        """Start (or restart) triggerer ``n``; returns its job id once it heartbeats."""
        name = f"triggerer-{n}"
        component = self.components.get(name)
        if component is None:
            env = dict(self.environment())
            env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] = str(free_port())
            component = self._add(name, ["triggerer"], env)
        known = set(self._alive_triggerer_ids())
        component.start()
        end = deadline if deadline is not None else time.monotonic() + 90

        def new_job() -> int | None:
            if not component.alive():
                code = component.process.returncode if component.process else None
                raise AirflowDeploymentError(f"{name} exited ({code}):\n{component.log_tail()}")
            fresh = [j for j in self._alive_triggerer_ids() if j not in known]
            return fresh[0] if fresh else None

        job_id = self._wait(end, f"{name} to heartbeat", new_job)
        self.triggerer_job_ids[n] = job_id
        return job_id

    def celery_worker(self, n: int) -> Component:
        return self.components[f"celery-worker-{n}"]

    @staticmethod
    def celery_hostname(n: int) -> str:
        """The hostname task instances run by Celery worker ``n`` record."""
        return f"celery-worker-{n}"

    def start_celery_worker(self, n: int, *, deadline: float | None = None) -> None:
        """Start (or restart) Celery worker ``n``; returns once it consumes from the broker."""
        name = f"celery-worker-{n}"
        component = self.components.get(name)
        node = f"worker-{n}@%h"
        if component is None:
            env = dict(self.environment())
            env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(free_port())
            env["AIRFLOW__CORE__HOSTNAME_CALLABLE"] = f"{HOSTNAME_MODULE}.hostname"
            env[HOSTNAME_ENV] = self.celery_hostname(n)
            concurrency = str(self.worker_concurrency)
            args = ["celery", "worker", "--celery-hostname", node, "--concurrency", concurrency]
            component = self._add(name, args, env)
        component.start()
        start = component.starts
        end = deadline if deadline is not None else time.monotonic() + 90

        def ready() -> bool:
            if not component.alive():
                code = component.process.returncode if component.process else None
                raise AirflowDeploymentError(f"{name} exited ({code}):\n{component.log_tail()}")
            # celery prints "<node> ready." once it consumes; only this start's lines count
            text = component.log_path.read_text(errors="replace")
            return " ready." in text.split(f"===== start {start} of {name}", 1)[-1]

        self._wait(end, f"{name} to be ready", ready)

    def kill_celery_worker(self, n: int) -> None:
        """SIGKILL Celery worker ``n``, its pool and the tasks it runs (a machine that dies)."""
        self.celery_worker(n).kill()

    def kill_triggerer(self, n: int) -> int:
        """SIGKILL triggerer ``n`` and its trigger runner; returns the job id it had."""
        self.triggerer(n).kill()
        return self.triggerer_job_ids[n]

    def freeze_triggerer(self, n: int) -> list[psutil.Process]:
        """SIGSTOP triggerer ``n`` and every process it started (its trigger runner, its log server),
        as a triggerer that stalls without dying: a stopped container, a long pause of its machine.
        Returns the frozen processes; SIGCONT them to let it go on where it stopped."""
        component = self.triggerer(n)
        if not component.alive() or component.pid is None:
            raise AirflowDeploymentError(f"triggerer-{n} is not running")
        frozen = [psutil.Process(component.pid), *component.descendants()]
        for proc in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGSTOP)
        return frozen

    def triggerer_number(self, job_id: int) -> int | None:
        """Which triggerer (1, 2, ...) runs as job ``job_id``."""
        return next((n for n, j in self.triggerer_job_ids.items() if j == job_id), None)

    def stop(self) -> None:
        """End every process (children included) and stop PostgreSQL; safe to call twice."""
        errors: list[str] = []
        order = [n for n in self.components if n.startswith(("triggerer", "celery-worker"))] + [
            "dag-processor",
            "scheduler",
            "api-server",
            "webserver",
        ]
        for name in order:
            component = self.components.get(name)
            if component is None:
                continue
            try:
                component.terminate(timeout=15)
            except Exception as err:
                errors.append(f"{name}: {err!r}")
        if self._api is not None:
            self._api.close()
            self._api = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        if self.redis is not None:
            with contextlib.suppress(OSError):
                shutil.copy2(self.redis.log_path, self.logs_dir / "redis.log")
            try:
                self.redis.stop()
            except Exception as err:
                errors.append(f"redis: {err!r}")
        if self.postgres is not None:
            with contextlib.suppress(OSError):
                shutil.copy2(self.postgres.log_path, self.logs_dir / "postgres.log")
            try:
                self.postgres.stop()
            except Exception as err:
                errors.append(f"postgres: {err!r}")
        self._watchdog_state.unlink(missing_ok=True)
        if errors:
            raise AirflowDeploymentError("stopping the deployment: " + "; ".join(errors))

    # ---- health ------------------------------------------------------------------------------

    def _wait(self, deadline: float, what: str, probe: Any, interval: float = 0.25) -> Any:
        last: Any = None
        while True:
            for component in self.components.values():
                if component.name.startswith(("triggerer", "celery-worker")) or component.process is None:
                    continue
                if not component.alive():
                    raise AirflowDeploymentError(
                        f"{component.name} exited ({component.process.returncode}) while waiting for "
                        f"{what}:\n{component.log_tail()}"
                    )
            try:
                last = probe()
            except (AirflowApiError, OSError) as err:
                last = err
            else:
                if last:
                    return last
            if time.monotonic() > deadline:
                raise AirflowDeploymentError(f"timed out waiting for {what} (last: {last!r})\n{self.tails()}")
            time.sleep(interval)

    def _api_up(self) -> bool:
        import httpx

        try:
            resp = httpx.get(f"{self.api_url}/api/{self.api.version}/{self._health_path}", timeout=5)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    @property
    def _health_path(self) -> str:
        return "health" if AIRFLOW_2 else "monitor/health"

    def health(self) -> dict[str, Any]:
        return self.api.get(self._health_path)

    def _core_healthy(self) -> bool:
        health = self.health()
        return all(
            (health.get(part) or {}).get("status") == "healthy"
            for part in ("metadatabase", "scheduler", "dag_processor")
        )

    def _alive_triggerer_ids(self) -> list[int]:
        return [int(j["id"]) for j in self.jobs("TriggererJob", alive=True)]

    def jobs(self, job_type: str, *, alive: bool = False) -> list[dict[str, Any]]:
        """Airflow's jobs of ``job_type`` (``id``, ``latest_heartbeat``), the newest first: from the
        REST API v2, or on Airflow 2 (API v1 has no jobs endpoint) from the metadata database."""
        if not AIRFLOW_2:
            found = self.api.get("jobs", job_type=job_type, is_alive=alive or None, limit=100)["jobs"]
            return sorted(found, key=lambda j: -int(j["id"]))
        import sqlalchemy

        assert self.postgres is not None
        if self._engine is None:
            self._engine = sqlalchemy.create_engine(
                self.postgres.url(self.driver), poolclass=sqlalchemy.pool.NullPool
            )
        query = "SELECT id, latest_heartbeat FROM job WHERE job_type = :job_type"
        if alive:  # Airflow's is_alive: running, with a heartbeat within the health threshold
            query += " AND state = 'running' AND latest_heartbeat > now() - make_interval(secs => :threshold)"
        with self._engine.connect() as conn:
            rows = conn.execute(
                sqlalchemy.text(query + " ORDER BY id DESC LIMIT 100"),
                {"job_type": job_type, "threshold": self.timings.triggerer_health_threshold},
            ).all()
        return [{"id": row.id, "latest_heartbeat": row.latest_heartbeat.isoformat()} for row in rows]

    def cpu_report(self) -> dict[str, float]:
        """CPU seconds per running component (with its workers, task and trigger processes)."""
        return {name: round(c.cpu_seconds(), 1) for name, c in self.components.items() if c.alive()}

    def tails(self, lines: int = 30) -> str:
        """The last lines of every component's log (and PostgreSQL's)."""
        parts = [f"----- {c.name} ({c.log_path})\n{c.log_tail(lines)}" for c in self.components.values()]
        if self.postgres is not None:
            parts.append(f"----- postgres\n{self.postgres.log_tail(1500)}")
        return "\n".join(parts)

    def __enter__(self) -> AirflowDeployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""A Pathways-on-GKE connection that signs in with a Google identity, against the stand-ins of
Google's token endpoint, the GKE API and the cluster's TLS endpoints (``sandbox.kube --google``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from airflow_provider_pathways.gke.objects import JobKind
from airflow_provider_pathways.hooks.kubernetes import CredentialsRefused, PathwaysJobHook
from airflow_provider_pathways.hooks.kubernetes_google import GkeConnectionError
from airflow_provider_pathways.triggers.pathways_job import PathwaysJobTrigger
from sandbox.kube.launcher import KubeStandin, start_kube_standin
from tests.dags.gke_google_scenarios import refused_namespace, refused_sensor_namespace
from tests.support.airflow_runs import load_dag, run_dag
from tests.support.airflow_versions import AIRFLOW_V_3_0_PLUS, AIRFLOW_V_3_1_PLUS, TASK_LOG_IN_OUTPUT
from tests.support.kube_jobs import act_when, async_wait_for, new_spec, stand_in_objects

REPO_ROOT = Path(__file__).resolve().parents[2]

TOKEN_LIFETIME = 3.0
NS = "google-identity"
# Every access token the stand-in issues starts so; none may reach an error or a log.
TOKEN_PREFIX = "ya29.sandbox-"
#: Airflow 3.0's dag.test() leaves structlog unconfigured: its print logger keeps the stdout of the
#: test that first used it, so whether a later test reads the task log depends on the order.
AIRFLOW_3_0 = AIRFLOW_V_3_0_PLUS and not AIRFLOW_V_3_1_PLUS


def _env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeStandin]:
    """Access tokens live TOKEN_LIFETIME seconds and every watch ends after one: a wait keeps
    coming back with a fresh token. Connections ``gke_google`` and ``gcp_google``."""
    standin = start_kube_standin(
        tmp_path_factory.mktemp("kube-google"),
        extra_args=("--google", "--token-lifetime", str(TOKEN_LIFETIME), "--max-watch-seconds", "1"),
    )
    gcp, gke = standin.google_connections("gcp_google", namespace=NS)
    with pytest.MonkeyPatch.context() as env:
        env.setenv(_env_name("gcp_google"), gcp)
        env.setenv(_env_name("gke_google"), gke)
        try:
            yield standin
        finally:
            standin.stop()


@pytest.fixture(scope="module")
def hour_long(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeStandin]:
    """Access tokens live an hour, as Google's do: a client keeps one it believes valid.
    Connections ``gke_google_hour`` and ``gcp_google_hour``."""
    standin = start_kube_standin(tmp_path_factory.mktemp("kube-google-hour"), extra_args=("--google",))
    gcp, gke = standin.google_connections("gcp_google_hour", namespace=NS)
    with pytest.MonkeyPatch.context() as env:
        env.setenv(_env_name("gcp_google_hour"), gcp)
        env.setenv(_env_name("gke_google_hour"), gke)
        try:
            yield standin
        finally:
            standin.stop()


def connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, standin: KubeStandin, **extra: Any) -> str:
    google = extra.pop("gcp_conn_id", "gcp_google")
    _, gke = standin.google_connections(google, namespace=NS, **extra)
    monkeypatch.setenv(_env_name(conn_id), gke)
    return conn_id


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["deferred", "polling"])
def test_a_wait_longer_than_three_token_lifetimes_stays_connected(
    short_lived: KubeStandin, capfd: pytest.CaptureFixture[str], mode: str
) -> None:
    """In the triggerer (deferred) and in the worker (polling) alike."""
    short_lived.control("requests/reset")
    grants_before = short_lived.control("google")["grants"]
    started = time.monotonic()

    outcome = run_dag(load_dag("gke_google_scenarios.py", f"gke_google_long_wait_{mode}"))["train"]

    assert outcome.state == "success"
    assert outcome.xcom["status"]["phase"] == "succeeded"
    assert "step 100: loss=0.5" in capfd.readouterr().out
    assert time.monotonic() - started > 3 * TOKEN_LIFETIME
    requests = short_lived.control("requests")
    assert requests["unauthorized"] == 0  # no request ever went out with an expired token
    assert short_lived.control("google")["grants"] - grants_before >= 3  # renewed along the way
    assert set(requests["by_endpoint"]) == {"public"}  # the cluster's endpoint from the GKE API
    if mode == "deferred":
        assert requests["by_verb_resource"].get("watch jobsets", 0) > 3  # the triggerer comes back


def test_the_private_and_the_dns_endpoint(short_lived: KubeStandin, monkeypatch: pytest.MonkeyPatch) -> None:
    assert short_lived.google is not None
    # The DNS endpoint's certificate is a publicly trusted one, checked against the system's CAs:
    # here the stand-in's CA stands for them.
    monkeypatch.setenv("SSL_CERT_FILE", short_lived.google["ca_file"])
    for endpoint in ("private", "dns"):
        short_lived.control("requests/reset")
        hook = PathwaysJobHook(connection(monkeypatch, f"gke_{endpoint}", short_lived, gke_endpoint=endpoint))
        assert hook.list_pods("none", NS) == []
        assert asyncio.run(hook.a_get_status("none", NS)).phase.value == "deleted"
        assert set(short_lived.control("requests")["by_endpoint"]) == {endpoint}


def test_a_revoked_token_gives_one_clear_error_naming_the_connection(
    hour_long: KubeStandin, caplog: pytest.LogCaptureFixture
) -> None:
    hook = PathwaysJobHook("gke_google_hour")
    assert hook.list_pods("none", NS) == []
    token = hook.async_hook.client_configuration.api_key["BearerToken"]  # the one it sends
    hour_long.control("google/revoke")

    with pytest.raises(CredentialsRefused) as caught:
        hook.get_status("none", NS)

    message = str(caught.value)
    assert "'gke_google_hour'" in message and "'gcp_google_hour'" in message
    assert "401 Unauthorized" in message and "revoked" in message
    assert token not in message and token not in repr(caught.value) and token not in caplog.text


async def test_a_wait_whose_token_is_revoked_ends_with_an_error_naming_the_connection(
    hour_long: KubeStandin, caplog: pytest.LogCaptureFixture
) -> None:
    spec = new_spec(NS, program_seconds=60)
    hook = PathwaysJobHook("gke_google_hour")
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    trigger = PathwaysJobTrigger(name=spec.name, namespace=NS, kubernetes_conn_id="gke_google_hour")
    assert not any(TOKEN_PREFIX in json.dumps(value) for value in trigger.serialize()[1].values())
    waiting = asyncio.ensure_future(_first_event(trigger))
    await async_wait_for(
        lambda: asyncio.to_thread(lambda: hour_long.control("state")["openWatches"] > 0), what="the watch"
    )

    await asyncio.to_thread(hour_long.control, "google/revoke")
    await asyncio.to_thread(hour_long.control, "watches/drop")  # the trigger comes back: 401
    event = await asyncio.wait_for(waiting, 30)

    assert event["status"] == "error"
    assert "'gke_google_hour'" in event["message"] and "401 Unauthorized" in event["message"]
    assert TOKEN_PREFIX not in event["message"] and TOKEN_PREFIX not in caplog.text
    PathwaysJobHook("gke_google_hour").delete_job(spec.name, NS)


async def test_a_wait_whose_credentials_get_no_new_token_ends_with_an_error_naming_the_connection(
    short_lived: KubeStandin, caplog: pytest.LogCaptureFixture
) -> None:
    spec = new_spec(NS, program_seconds=60)
    hook = PathwaysJobHook("gke_google")
    await asyncio.to_thread(hook.create_job, spec.to_pathwaysjob(), NS)
    trigger = PathwaysJobTrigger(name=spec.name, namespace=NS, kubernetes_conn_id="gke_google")
    waiting = asyncio.ensure_future(_first_event(trigger))
    await async_wait_for(
        lambda: asyncio.to_thread(lambda: short_lived.control("state")["openWatches"] > 0), what="the watch"
    )
    # The service account is disabled: its token expires and no new one comes.
    await asyncio.to_thread(short_lived.control, "google/refuse", on="true")
    try:
        event = await asyncio.wait_for(waiting, 30)
        with pytest.raises(GkeConnectionError) as caught:
            PathwaysJobHook("gke_google").list_pods(spec.name, NS)
    finally:
        await asyncio.to_thread(short_lived.control, "google/refuse", on="false")

    assert event["status"] == "error"
    for message in (event["message"], str(caught.value)):
        assert "'gke_google'" in message and "'gcp_google'" in message
        assert "got no access token (invalid_grant" in message
        assert TOKEN_PREFIX not in message
    assert TOKEN_PREFIX not in caplog.text
    assert hook.delete_job(spec.name, NS) is True


@pytest.mark.parametrize("status", ["500", "429"])
async def test_a_gke_api_server_error_while_signing_in_is_ridden_out_as_an_outage(
    short_lived: KubeStandin, monkeypatch: pytest.MonkeyPatch, status: str
) -> None:
    """The GKE API answers ``getCluster`` with a server error or asks to retry (``INTERNAL`` and
    ``RESOURCE_EXHAUSTED`` are not among what its client retries itself, container_v1's
    ``default_retry``): an outage, which the wait rides out, not a connection to fix that would
    fail the task for good."""
    conn = connection(monkeypatch, f"gke_google_{status}", short_lived)  # signs in afresh
    spec = new_spec(NS, program_seconds=1)
    await asyncio.to_thread(PathwaysJobHook("gke_google").create_job, spec.to_pathwaysjob(), NS)
    await asyncio.to_thread(short_lived.control, "google/fail-cluster", status=status, count="2")
    trigger = PathwaysJobTrigger(name=spec.name, namespace=NS, kubernetes_conn_id=conn)

    event = await asyncio.wait_for(_first_event(trigger), 60)

    assert event["status"] == "done" and event["job"]["phase"] == "succeeded", event
    assert (await asyncio.to_thread(short_lived.control, "google"))["cluster_faults"] == 0
    assert PathwaysJobHook("gke_google").delete_job(spec.name, NS) is True


@pytest.mark.slow  # a whole DAG run waiting until its program runs, four times
@pytest.mark.versioned  # each Airflow logs the refusal its own way
@pytest.mark.parametrize("policy", ["delete", "keep"])
@pytest.mark.parametrize("mode", ["deferred", "polling"])
def test_credentials_refused_in_the_middle_of_a_wait_fail_the_try_for_good(
    short_lived: KubeStandin, capfd: pytest.CaptureFixture[str], mode: str, policy: str
) -> None:
    """The service account is disabled while the task waits. Google's token endpoint answers the
    next grant ``400 {"error": "invalid_grant", ...}`` (RFC 6749 section 5.2; "Invalid grant:
    account not found" for a disabled or deleted account), which google-auth raises as a
    ``RefreshError`` it does not retry (``google.oauth2._client._can_retry``). The API server signs
    in each request, not an open watch (k8s.io/apiserver ``WithAuthentication``): the refusal shows
    when the wait looks again, or its watch comes back (each second here).

    No retry would see more, so the try fails at once though two retries are left, with the
    ``GkeConnectionError`` a refusal at the start raises (the connections, and what to check); and
    as no try will follow the job, it is handled as the last try's give-up policy says: with
    ``failure`` in ``delete_on`` a delete is tried, which the same refusal stops (the message says to
    end the job by hand); without, it is left running, and the message says so."""
    namespace = refused_namespace(mode, policy)
    dag = load_dag("gke_google_scenarios.py", f"gke_google_refused_{mode}_{policy}")
    hook = PathwaysJobHook(kubernetes_conn_id=None, config_file=str(short_lived.kubeconfig))
    for left in stand_in_objects(short_lived, "pathwaysjobs", namespace):  # by an earlier run
        hook.delete_job(left["metadata"]["name"], namespace)
        hook.wait_until_deleted(left["metadata"]["name"], namespace, JobKind.PATHWAYS_JOB, 30)

    def program_runs() -> bool:
        pods = short_lived.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
        return any(
            "pathways-head" in p["metadata"]["name"] and p["status"].get("phase") == "Running" for p in pods
        )

    refusing = act_when(program_runs, lambda _: short_lived.control("google/refuse", on="true"), timeout=120)
    try:
        outcome = run_dag(dag)["train"]
        refusing.join(5)
    finally:
        short_lived.control("google/refuse", on="false")
    logs = capfd.readouterr().out
    jobs = stand_in_objects(short_lived, "pathwaysjobs", namespace)
    for job in jobs:
        hook.delete_job(job["metadata"]["name"], namespace)

    assert refusing.failures == []  # type: ignore[attr-defined]
    assert (outcome.state, outcome.try_number) == ("failed", 1), logs[-6000:]  # why an earlier try ended
    assert [j["metadata"].get("deletionTimestamp") for j in jobs] == [None]  # still there, running
    if TASK_LOG_IN_OUTPUT and not AIRFLOW_3_0:
        refused = (
            "Kubernetes connection 'gke_google' (Google connection 'gcp_google'): the Google "
            "credentials got no access token (invalid_grant: Invalid grant: account not found); "
            "check that the account, its key and its impersonation rights are still valid"
        )
        # the failure as the task log shows it (the exception's full name on most versions)
        assert "GkeConnectionError" in logs and refused in logs
        if policy == "delete":
            assert "could not be deleted or cancelled either for the same reason" in logs
            assert "may still be running: end it by hand" in logs
        else:
            assert "is left running, as the task's cleanup policy says" in logs
        assert "PathwaysWatchLost" not in logs and "is kept, and the next try reattaches" not in logs
    assert TOKEN_PREFIX not in logs


@pytest.mark.end_to_end  # a rarer whole run (seconds): `make test` runs it
@pytest.mark.parametrize("mode", ["deferred", "polling"])
def test_credentials_refused_while_a_sensor_waits_fail_it_for_good(
    short_lived: KubeStandin, capfd: pytest.CaptureFixture[str], mode: str
) -> None:
    """The readiness sensor meets the refusal the operators meet (the test above): no retry would
    see more, so it fails at once though two retries are left, with the ``GkeConnectionError``."""
    namespace = refused_sensor_namespace(mode)
    hook = PathwaysJobHook(kubernetes_conn_id=None, config_file=str(short_lived.kubeconfig))
    spec = new_spec(namespace, program_seconds=300, max_ready_slices=0)
    spec.name = "never-ready"
    if not stand_in_objects(short_lived, "pathwaysjobs", namespace):
        hook.create_job(spec.to_pathwaysjob(), namespace)
    short_lived.control("requests/reset")

    def sensor_looked() -> bool:
        by_verb = short_lived.control("requests")["by_verb_resource"]
        return bool(by_verb.get("get pathwaysjobs") or by_verb.get("watch pathwaysjobs"))

    refusing = act_when(sensor_looked, lambda _: short_lived.control("google/refuse", on="true"), timeout=120)
    try:
        outcome = run_dag(load_dag("gke_google_scenarios.py", f"gke_google_refused_sensor_{mode}"))["ready"]
        refusing.join(5)
    finally:
        short_lived.control("google/refuse", on="false")
    logs = capfd.readouterr().out

    assert refusing.failures == []  # type: ignore[attr-defined]
    assert (outcome.state, outcome.try_number) == ("failed", 1), logs[-6000:]  # why an earlier try ended
    if TASK_LOG_IN_OUTPUT and not AIRFLOW_3_0:
        assert "GkeConnectionError" in logs and "got no access token (invalid_grant" in logs
    assert TOKEN_PREFIX not in logs


async def _first_event(trigger: PathwaysJobTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger fired nothing")


def test_connection_mistakes_are_named(short_lived: KubeStandin, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = {
        "both": ({"kube_config_path": "/etc/kubeconfig"}, "gcp_conn_id .* and kube_config_path exclude"),
        "no_cluster": ({"gke_cluster": ""}, "gcp_conn_id needs the cluster too: set gke_cluster"),
        "bad_endpoint": ({"gke_endpoint": "internal"}, "gke_endpoint 'internal' is none of public"),
        "unknown": ({"gke_cluster": "nope"}, "the GKE API answered 404 for projects/.*/clusters/nope"),
        "no_google": ({"gcp_conn_id": "missing_google"}, "no Airflow connection 'missing_google'"),
    }
    for name, (extra, error) in cases.items():
        hook = PathwaysJobHook(connection(monkeypatch, f"gke_{name}", short_lived, **extra))
        with pytest.raises(GkeConnectionError, match=f"Kubernetes connection 'gke_{name}'.*{error}"):
            hook.list_pods("none", NS)


def test_a_missing_default_google_connection_signs_in_with_application_default_credentials(
    short_lived: KubeStandin, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Airflow 3 no longer creates ``google_cloud_default`` (Composer does): named but missing, it
    falls back to Application Default Credentials, as the google provider's hooks and the cache
    cleanup do; here ``GOOGLE_APPLICATION_CREDENTIALS`` holds the stand-in's service-account key.
    Without any, the error names the connection and both ways out."""
    assert short_lived.google is not None
    monkeypatch.delenv(_env_name("google_cloud_default"), raising=False)
    hook = PathwaysJobHook(
        connection(monkeypatch, "gke_adc", short_lived, gcp_conn_id="google_cloud_default")
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", short_lived.google["service_account_file"])
    grants_before = short_lived.control("google")["grants"]
    assert hook.list_pods("none", NS) == []
    assert short_lived.control("google")["grants"] > grants_before  # the key's identity signed in

    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    hook = PathwaysJobHook(
        connection(monkeypatch, "gke_no_adc", short_lived, gcp_conn_id="google_cloud_default")
    )
    with pytest.raises(GkeConnectionError) as refused:
        hook.list_pods("none", NS)
    message = str(refused.value)
    assert "Kubernetes connection 'gke_no_adc'" in message
    assert "no Airflow connection 'google_cloud_default' and no Application Default Credentials" in message


def test_kubeconfig_given_by_the_task_wins_over_the_google_identity(
    short_lived: KubeStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = PathwaysJobHook("gke_google", config_file=str(short_lived.kubeconfig))
    short_lived.control("requests/reset")
    assert hook.list_pods("none", NS) == []
    assert short_lived.control("requests")["by_endpoint"] == {}  # the kubeconfig's plain HTTP address


def test_disable_verify_ssl_reaches_a_server_whose_certificate_is_not_trusted(
    short_lived: KubeStandin,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The connection form's "Disable SSL" (``disable_verify_ssl``), as cncf-kubernetes' own hook
    honours it: a kubeconfig naming the cluster's TLS endpoint without its CA is refused, at once
    (an untrusted certificate is no outage), unless the connection disables the check."""
    assert short_lived.google is not None
    kubeconfig = yaml.safe_load(short_lived.kubeconfig.read_text())
    kubeconfig["clusters"][0]["cluster"] = {"server": f"https://{short_lived.google['endpoints']['public']}"}
    path = tmp_path / "kubeconfig-without-ca"
    path.write_text(yaml.safe_dump(kubeconfig))
    for conn_id, disabled in (("tls_checked", False), ("tls_unchecked", True)):
        extra = {"kube_config_path": str(path), **({"disable_verify_ssl": True} if disabled else {})}
        monkeypatch.setenv(_env_name(conn_id), json.dumps({"conn_type": "pathways_gke", "extra": extra}))
    short_lived.control("requests/reset")

    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        PathwaysJobHook("tls_checked").get_status("none", NS)
    assert "Kubernetes API error" not in "".join(capfd.readouterr())  # the task log: no retry
    assert PathwaysJobHook("tls_unchecked").get_status("none", NS).phase.value == "deleted"
    assert set(short_lived.control("requests")["by_endpoint"]) == {"public"}


# Run in a process where the google provider's hooks cannot be imported (its package metadata,
# which Airflow's provider discovery reads, stays).
WITHOUT_GOOGLE_PROVIDER = """
import sys

class NoGoogleProvider:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("airflow.providers.google.cloud", "airflow.providers.google.common")):
            raise ModuleNotFoundError(f"No module named {name!r}")

sys.meta_path.insert(0, NoGoogleProvider())
from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook
from airflow_provider_pathways.hooks.kubernetes_google import GkeConnectionError

assert PathwaysJobHook(kubernetes_conn_id=None, config_file=sys.argv[1]).list_pods("none", "ns") == []
try:
    PathwaysJobHook("gke_google").list_pods("none", "ns")
except GkeConnectionError as err:
    print(err)
"""


@pytest.mark.end_to_end  # a rarer whole run (seconds): `make test` runs it
def test_without_the_google_provider_a_kubeconfig_works_and_a_google_identity_says_what_to_install(
    short_lived: KubeStandin,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_GOOGLE_PROVIDER, str(short_lived.kubeconfig)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Kubernetes connection 'gke_google'" in done.stdout
    assert (
        "needs apache-airflow-providers-google (pip install 'airflow-provider-pathways[google]')"
        in done.stdout
    )

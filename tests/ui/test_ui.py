"""What a user sees in the Airflow UI, in headless Chromium against a real API server.

- the Providers page lists the package, and its link opens the documentation index;
- the five example DAGs are listed without import errors, each shows its documentation and a
  trigger form whose fields carry titles and help text;
- each connection form (Pathways on GKE, Pathways on Slurm over REST and over SSH) shows help text
  on every field, is filled and saved through the UI, and the saved connection, read back through
  the provider's hooks, does what the form said.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from airflow_provider_pathways.provider_info import DOCUMENTATION_URL, get_provider_info
from tests.ui.support import EXAMPLE_DAGS, REPO_ROOT, AirflowUi, Screenshots, serve_directory

pytestmark = pytest.mark.ui

DAG_IDS = (
    "example_cache_cleanup",
    "example_cache_lifecycle_rule",
    "example_pathways_batch_inference",
    "example_pathways_slurm",
    "example_pathways_sweep",
    "example_pathways_training",
)
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJwYXRod2F5cyJ9.dWktdGVzdC1zaWduYXR1cmU"


# ---- forms and fields ---------------------------------------------------------------------


def conn_fields(conn_type: str) -> dict[str, Any]:
    for conn in get_provider_info()["connection-types"]:
        if conn["connection-type"] == conn_type:
            return conn["conn-fields"]
    raise AssertionError(conn_type)


def field(scope: Locator, label: str) -> Locator:
    """The form field (label, input, help text) whose label reads ``label`` (a required one ends in *)."""
    pattern = re.compile(rf"^\s*{re.escape(label)}\s*\*?\s*$")
    return scope.locator('[data-part="root"][role="group"]').filter(
        has=scope.page.locator("label", has_text=pattern)
    )


def text_input(scope: Locator, label: str) -> Locator:
    return field(scope, label).locator("input:not([type=hidden]), textarea").first


def help_text(scope: Locator, label: str) -> Locator:
    return field(scope, label).locator('[data-part="helper-text"]')


def switch(scope: Locator, label: str) -> Locator:
    return field(scope, label).locator('label[data-scope="switch"]')


def choose(scope: Locator, label: str, option: str) -> None:
    """Pick ``option`` (as the dropdown shows it) in the dropdown labelled ``label``."""
    field(scope, label).get_by_role("combobox").click()
    scope.page.get_by_role("option", name=option, exact=True).click()
    expect(field(scope, label)).to_contain_text(option)


def new_connection(page: Page, ui: AirflowUi, conn_id: str, type_name: str) -> Locator:
    page.goto(f"{ui.url}/connections")
    page.get_by_role("button", name="Add Connection").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Connection ID").fill(conn_id)
    dialog.get_by_role("combobox").first.fill(type_name)
    page.get_by_role("option", name=type_name, exact=True).click()
    expect(dialog.get_by_role("button", name="Extra Fields", exact=True)).to_be_visible()
    return dialog


def open_extra_fields(dialog: Locator) -> None:
    dialog.get_by_role("button", name="Extra Fields", exact=True).click()


def check_help_text_on_every_field(dialog: Locator, conn_type: str) -> None:
    for name, spec in conn_fields(conn_type).items():
        expect(help_text(dialog, spec["label"]), name).to_have_text(spec["description"])


def save(page: Page, dialog: Locator, conn_id: str) -> None:
    dialog.get_by_role("button", name="Save").click()
    expect(dialog).to_be_hidden()
    expect(page.get_by_text(conn_id, exact=True)).to_be_visible()


@pytest.fixture
def saved_connection(airflow_ui: AirflowUi, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make connections saved through the UI visible to hooks in this process, secrets included."""

    def load(*conn_ids: str) -> None:
        saved = airflow_ui.connections()
        for conn_id in conn_ids:
            conn = dict(saved[conn_id])
            conn["extra"] = json.loads(conn.get("extra") or "{}")
            monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))

    return load


# ---- providers and documentation ------------------------------------------------------------


def test_the_providers_page_links_the_documentation_index(
    page: Page, airflow_ui: AirflowUi, built_docs: Path, screenshots: Screenshots
) -> None:
    # One URL everywhere: the package metadata Airflow reads, pyproject.toml and provider_info.
    urls = importlib.metadata.metadata("airflow-provider-pathways").get_all("Project-URL") or []
    assert f"Documentation, {DOCUMENTATION_URL}" in urls
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert re.findall(r'^Documentation = "(.*)"$', pyproject, re.MULTILINE) == [DOCUMENTATION_URL]

    page.goto(f"{airflow_ui.url}/providers")
    link = page.get_by_role("link", name="airflow-provider-pathways", exact=True)
    expect(link).to_have_attribute("href", DOCUMENTATION_URL)
    row = page.get_by_role("row").filter(has=link)
    expect(row).to_contain_text("Run Google Pathways workloads")
    screenshots.take(page, "providers")

    # No hosting here: the docs URL is answered from the built site, as its host would.
    docs_site = re.compile("^" + re.escape(DOCUMENTATION_URL))
    page.context.route(docs_site, serve_directory(built_docs, DOCUMENTATION_URL))
    try:
        with page.context.expect_page() as opened:
            link.click()
        docs = opened.value
        docs.wait_for_load_state()
        expect(docs).to_have_url(DOCUMENTATION_URL)
        expect(docs.locator("h1")).to_have_text(re.compile("airflow-provider-pathways"))
        canonical = docs.locator('link[rel="canonical"]')
        expect(canonical).to_have_attribute("href", DOCUMENTATION_URL + "index.html")
        expect(docs.get_by_role("link", name="Connections").first).to_be_visible()
        for guide in get_provider_info()["integrations"][0]["how-to-guide"]:
            assert (built_docs / guide.removeprefix(DOCUMENTATION_URL)).is_file(), guide
        screenshots.take(docs, "docs-index")
        docs.close()
    finally:
        page.context.unroute(docs_site)


# ---- example DAGs ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def example_dags() -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLE_DAGS))
    assert bag.import_errors == {}
    return bag.dags


def test_the_example_dags_are_listed_without_import_errors(page: Page, airflow_ui: AirflowUi) -> None:
    assert airflow_ui.api("importErrors")["total_entries"] == 0
    listed = {dag["dag_id"] for dag in airflow_ui.api("dags")["dags"]}
    assert listed == set(DAG_IDS)
    page.goto(f"{airflow_ui.url}/dags")
    for dag_id in DAG_IDS:
        expect(page.get_by_role("link", name=dag_id, exact=True).first).to_be_visible()
    page.wait_for_load_state("networkidle")
    expect(page.get_by_role("button", name="Dag Import Error")).to_have_count(0)


def _plain(markdown: str) -> str:
    return markdown.strip().splitlines()[0].replace("``", "").replace("`", "")


@pytest.mark.parametrize("dag_id", DAG_IDS)
def test_each_example_dag_shows_its_docs_and_a_titled_trigger_form(
    page: Page, airflow_ui: AirflowUi, example_dags: dict[str, Any], screenshots: Screenshots, dag_id: str
) -> None:
    dag = example_dags[dag_id]
    assert dag.doc_md, dag_id
    page.goto(f"{airflow_ui.url}/dags/{dag_id}")
    page.get_by_role("button", name="Dag Docs").click()
    docs = page.get_by_role("dialog")
    expect(docs).to_contain_text(_plain(dag.doc_md))
    screenshots.take(page, f"{dag_id}-docs")
    page.keyboard.press("Escape")
    expect(docs).to_be_hidden()

    page.get_by_role("button", name="Trigger Dag").first.click()
    form = page.get_by_role("dialog")
    expect(form).to_contain_text(f"Trigger Dag - {dag_id}")
    if not dag.params:
        expect(form.get_by_text("Run Parameters")).to_have_count(0)
    for key, param in dag.params.items():
        title = param.schema.get("title")
        assert title and param.description, f"{dag_id}: param {key!r} needs a title and a description"
        expect(help_text(form, title)).to_have_text(param.description)
        # an array of strings is one per line (the form's textarea: "Enter each string on a new line")
        shown = "\n".join(param.value) if isinstance(param.value, list) else str(param.value)
        expect(text_input(form, title)).to_have_value(shown)
        bare_key = re.compile(rf"^\s*{re.escape(key)}\s*\*?\s*$")
        expect(form.locator("label", has_text=bare_key)).to_have_count(0)
    screenshots.take(page, f"{dag_id}-trigger")


# ---- connection forms -----------------------------------------------------------------------


def test_gke_connection_saved_through_the_form_reaches_the_cluster(
    page: Page, airflow_ui: AirflowUi, kube: Any, saved_connection: Any, screenshots: Screenshots
) -> None:
    """``kube``: the Kubernetes stand-in the GKE tests share; the form gets its kubeconfig path."""
    from airflow_provider_pathways.hooks.kubernetes import PathwaysJobHook

    dialog = new_connection(page, airflow_ui, "ui_gke", "Pathways on GKE")
    open_extra_fields(dialog)
    check_help_text_on_every_field(dialog, "pathways_gke")
    expect(switch(dialog, "In cluster configuration")).to_have_attribute("data-state", "unchecked")
    text_input(dialog, "Kube config path").fill(str(kube.kubeconfig))
    text_input(dialog, "Namespace").fill("ml")
    text_input(dialog, "GCP project (Google sign-in, console links)").fill("tpu-project")
    text_input(dialog, "GKE cluster name (Google sign-in, console links)").fill("tpu-cluster")
    text_input(dialog, "GKE cluster location (Google sign-in, console links)").fill("us-east5")
    screenshots.take(dialog, "gke-form")
    save(page, dialog, "ui_gke")

    saved_connection("ui_gke")
    hook = PathwaysJobHook(kubernetes_conn_id="ui_gke")
    assert hook.get_namespace() == "ml"
    assert hook.resolve_namespace(None) == "ml"
    assert hook.console_location() == ("tpu-project", "tpu-cluster", "us-east5")
    assert hook.list_pods("no-such-job", "ml") == []  # a real request, authenticated by the kubeconfig
    assert not hook.is_in_cluster


@pytest.mark.parametrize(
    ("clicks", "local_files"),
    [((), False), (("on", "off"), False), (("on",), True)],
    ids=["untouched", "on-and-off", "on"],
)
def test_slurm_rest_connection_saved_through_the_form(
    page: Page,
    airflow_ui: AirflowUi,
    saved_connection: Any,
    screenshots: Screenshots,
    tmp_path: Path,
    clicks: tuple[str, ...],
    local_files: bool,
) -> None:
    from airflow_provider_pathways.hooks.slurm import SlurmHook

    conn_id = f"ui_slurm_rest_{len(clicks)}"
    dialog = new_connection(page, airflow_ui, conn_id, "Pathways on Slurm")
    dialog.get_by_label("Host", exact=True).fill("https://slurm.example.com")
    dialog.get_by_label("Cluster user", exact=True).fill("pathways")
    # What `scontrol token` prints, pasted as it is.
    dialog.get_by_label("JWT (REST) or SSH password (optional)", exact=True).fill(f"SLURM_JWT={TOKEN}")
    open_extra_fields(dialog)
    if not clicks:
        check_help_text_on_every_field(dialog, "pathways_slurm")
    expect(field(dialog, "Transport")).to_contain_text("REST (slurmrestd)")
    expect(field(dialog, "slurmrestd API version (REST)")).to_contain_text("auto (detect)")
    expect(field(dialog, "Scheme (REST)")).to_contain_text("from the host and port")
    choose(dialog, "slurmrestd API version (REST)", "v0.0.40")
    choose(dialog, "Scheme (REST)", "http")  # contradicts the https:// host: TLS must stay
    files = switch(dialog, "Job files are on this machine's filesystem (REST)")
    expect(files).to_have_attribute("data-state", "unchecked")  # what the hook does when unset
    for click in clicks:
        files.click()
        expect(files).to_have_attribute("data-state", "checked" if click == "on" else "unchecked")
    screenshots.take(dialog, f"slurm-rest-form-{len(clicks)}")
    save(page, dialog, conn_id)

    saved_connection(conn_id)
    hook = SlurmHook(conn_id)
    if not local_files:  # REST with no way to read job files: refused, naming both fixes
        ok, message = hook.test_connection()
        assert not ok and "REST alone cannot read job files" in message
        with pytest.raises(ValueError, match="set extra ssh_host"):
            hook.settings  # noqa: B018
        return
    try:
        settings = hook.settings
        assert (settings.transport, settings.scheme, settings.host) == ("rest", "https", "slurm.example.com")
        assert settings.port == 6820
        assert settings.api_version == "v0.0.40"
        assert settings.password == TOKEN
        assert settings.shared_fs is True
        job_output = tmp_path / "slurm-1.out"
        job_output.write_text("step 3: loss=0.6931\n")
        assert hook.read_file(str(job_output)) == "step 3: loss=0.6931\n"
    finally:
        hook.close()


def test_slurm_ssh_connection_saved_through_the_form(
    page: Page, airflow_ui: AirflowUi, saved_connection: Any, screenshots: Screenshots
) -> None:
    from airflow_provider_pathways.hooks.slurm import SlurmHook

    known_hosts = (
        "[login-0.example.com]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7aQ0hNb6Xr8y1zCkqG7m2Yw3X2\n"
        "[login-1.example.com]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK3pL6mN9oQ2rS5tU8vW1xY4zA7bC0dE3"
    )
    dialog = new_connection(page, airflow_ui, "ui_slurm_ssh", "Pathways on Slurm")
    dialog.get_by_label("Host", exact=True).fill("login-0.example.com")
    dialog.get_by_label("Port", exact=True).fill("2222")
    dialog.get_by_label("Cluster user", exact=True).fill("pathways")
    open_extra_fields(dialog)
    choose(dialog, "Transport", "SSH (login node)")
    text_input(dialog, "SSH private key file").fill("/opt/airflow/keys/slurm")
    text_input(dialog, "SSH known_hosts (text or path)").fill(known_hosts)
    text_input(dialog, "Directory of the Slurm commands (SSH)").fill("/opt/slurm/bin")
    expect(switch(dialog, "Strict SSH host key checking")).to_have_attribute("data-state", "checked")
    screenshots.take(dialog, "slurm-ssh-form")
    save(page, dialog, "ui_slurm_ssh")

    saved_connection("ui_slurm_ssh")
    hook = SlurmHook("ui_slurm_ssh")
    try:
        settings = hook.settings
        assert (settings.transport, settings.host, settings.port) == ("ssh", "login-0.example.com", 2222)
        assert settings.login == "pathways"
        assert settings.key_file == "/opt/airflow/keys/slurm"
        assert settings.known_hosts == known_hosts  # both lines, as typed
        assert settings.strict_host_key_checking is True
        assert settings.slurm_bin_dir == "/opt/slurm/bin"
        assert settings.password is None
        assert settings.shared_fs is False  # files over SFTP from the login node
    finally:
        hook.close()

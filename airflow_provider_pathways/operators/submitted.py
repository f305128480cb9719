"""What a try submits (a GKE manifest, a Slurm request), as the task log and XCom show it.

Secrets are masked before anything is shown: values Airflow's masker knows (``mask_secret``,
connection passwords, Variables with secret names) in every string, and environment variable values
whose names Airflow deems sensitive (``API_TOKEN``, ``DB_PASSWORD``...; its
``[core] sensitive_var_conn_names`` too) as ``***``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from functools import cache
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from airflow.sdk.definitions.context import Context
    from airflow.sdk.types import Logger

#: XCom key of the manifest a ``PathwaysJobOperator`` submitted (or would submit, in a dry run).
SUBMITTED_MANIFEST_KEY = "submitted_manifest"
#: XCom key of the request a Slurm job operator submitted (or would submit, in a dry run).
SUBMITTED_REQUEST_KEY = "submitted_request"
MASK = "***"

# Airflow 3.3's DEFAULT_SENSITIVE_FIELDS, for a worker whose masker was never configured.
_FALLBACK_SENSITIVE = frozenset(
    {
        "access_key", "access_token", "api_key", "apikey", "auth_header", "authorization", "bearer",
        "connection_string", "dsn", "passphrase", "passwd", "password", "private_key", "proxy",
        "proxy_password", "proxies", "secret", "service_account", "service_key", "token",
        "keyfile_dict", "webhook_url",
    }
)  # fmt: skip


@cache
def _sensitive_words() -> frozenset[str]:
    """The installed Airflow's default sensitive words (3.1+: the SDK's masker; 2.x: ``utils.log``),
    with those of Airflow 3.3."""
    import importlib
    import warnings

    for module in ("airflow.sdk._shared.secrets_masker", "airflow.utils.log.secrets_masker"):
        try:
            with warnings.catch_warnings():  # a module that only moved warns on some versions
                warnings.simplefilter("ignore")
                words = importlib.import_module(module).DEFAULT_SENSITIVE_FIELDS
        except (ImportError, AttributeError):
            continue
        return frozenset(words) | _FALLBACK_SENSITIVE
    return _FALLBACK_SENSITIVE


def _redact() -> Callable[..., Any]:
    """Airflow's ``redact`` (the masker's names and registered secrets); without it, the identity."""
    try:
        from airflow.providers.common.compat.sdk import redact
    except (ImportError, AttributeError):  # a common-compat without it: the names below still hold
        return lambda value, name=None: value
    return redact  # type: ignore[no-any-return]


def secret_name(name: str) -> bool:
    """Whether a value named ``name`` is hidden: Airflow's default rule (a sensitive word in the
    lower-cased name), which holds also where the masker was not configured."""
    normalized = re.sub(r"\W+", "_", name.strip().lower())
    return any(word in normalized for word in _sensitive_words())


def masked_text(value: Any) -> Any:
    """``value`` (JSON-like) with every secret Airflow's masker knows replaced by ``***`` in its
    strings; ``env`` entries (``{"name": ..., "value": ...}``) with a secret name masked whole."""
    redact = _redact()

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return redact(item)
        if isinstance(item, Mapping):
            name = item.get("name")
            hidden = isinstance(name, str) and "value" in item and _hidden(name, item["value"], redact)
            return {key: MASK if hidden and key == "value" else walk(sub) for key, sub in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(sub) for sub in item]
        return item

    return walk(value)


def masked_environment(environment: Mapping[str, str]) -> dict[str, str]:
    """An environment with the values of secret-looking names as ``***`` and registered secrets
    masked in the others."""
    redact = _redact()
    return {
        name: MASK if _hidden(name, value, redact) else redact(value) for name, value in environment.items()
    }


def _hidden(name: str, value: Any, redact: Callable[..., Any]) -> bool:
    return secret_name(name) or (isinstance(value, str) and redact(value, name) == MASK)


def as_yaml(value: Any) -> str:
    """Block-style YAML (multi-line strings as literal blocks), keys in their order."""
    import yaml

    from airflow_provider_pathways.gke.spec.yaml_io import BlockDumper

    return yaml.dump(value, Dumper=BlockDumper, sort_keys=False, default_flow_style=False)


def show_submission(
    log: Logger, context: Context | None, key: str, title: str, shown: Mapping[str, Any], *, dry_run: bool
) -> None:
    """Push ``shown`` (already masked) to XCom under ``key`` (no XCom without a context:
    ``BaseOperator.dry_run()``) and log it once as YAML under ``title``: at INFO in a dry run, at
    DEBUG in a real one (as ``KubernetesPodOperator`` logs its pod: the XCom holds it, and the task
    log keeps the program's own lines)."""
    log.log(logging.INFO if dry_run else logging.DEBUG, "%s:\n%s", title, as_yaml(dict(shown)).rstrip())
    if context is not None:
        context["ti"].xcom_push(key=key, value=dict(shown))


def placeholder_context(task: Any) -> Context:
    """A context for ``BaseOperator.dry_run()``, outside any run: a run with id ``dry_run``."""
    ti = SimpleNamespace(
        dag_id=task.dag_id, task_id=task.task_id, run_id="dry_run", map_index=-1, try_number=1
    )
    return cast("Context", {"ti": ti})

"""Google credentials when no Airflow connection gives them: Application Default Credentials, with
an optional impersonation chain, as the google provider's ``GoogleBaseHook`` would build them.

Used by the compilation-cache cleanup and by Pathways-on-GKE connections whose ``gcp_conn_id`` is the
default, ``google_cloud_default``, and does not exist (Airflow 3 no longer creates it; Composer
does): workload identity, a metadata server, ``GOOGLE_APPLICATION_CREDENTIALS`` or ``gcloud auth
application-default login`` then sign in. ``google.auth`` is imported only when called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.auth.credentials import Credentials

#: The Google Cloud connection used when none is named; missing, it falls back to ADC.
DEFAULT_GCP_CONN_ID = "google_cloud_default"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
#: Where Application Default Credentials come from, for error messages.
ADC_SOURCES = "GOOGLE_APPLICATION_CREDENTIALS, workload identity or `gcloud auth application-default login`"


class NoDefaultCredentials(RuntimeError):
    """No Application Default Credentials could be found."""


def impersonation_chain_of(chain: str | Sequence[str] | None) -> list[str]:
    """``impersonation_chain`` as a list: a comma-separated string or a sequence; empty parts dropped."""
    if not chain:
        return []
    parts = chain.split(",") if isinstance(chain, str) else list(chain)
    return [part.strip() for part in parts if part and part.strip()]


def application_default_credentials(
    scope: str, impersonation_chain: str | Sequence[str] | None = None
) -> tuple[Credentials, str | None]:
    """Application Default Credentials for ``scope`` and their project, acting as the last account
    of ``impersonation_chain`` (the others delegate) when given. Raises :class:`NoDefaultCredentials`."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, project = google.auth.default(scopes=[scope])
    except DefaultCredentialsError:
        raise NoDefaultCredentials(f"no Application Default Credentials ({ADC_SOURCES})") from None
    chain = impersonation_chain_of(impersonation_chain)
    if chain:
        from google.auth import impersonated_credentials

        credentials = impersonated_credentials.Credentials(
            source_credentials=credentials,
            target_principal=chain[-1],
            delegates=chain[:-1],
            target_scopes=[scope],
        )
    return credentials, project

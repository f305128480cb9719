"""A small client for Airflow's stable REST API: v2 (``/api/v2``, Airflow 3) with a JWT from the
simple auth manager, or v1 (``/api/v1``, Airflow 2) with basic auth of a FAB user."""

from __future__ import annotations

import threading
from typing import Any

import httpx


class AirflowApiError(RuntimeError):
    """A REST call answered with an unexpected status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path} -> {status}: {body[:2000]}")
        self.status = status
        self.body = body


class AirflowApi:
    """REST API calls as one user. v2: the token comes from ``POST /auth/token`` and is renewed on
    401; v1: every call carries the user's basic auth."""

    def __init__(
        self, base_url: str, username: str, password: str, *, version: str = "v2", timeout: float = 30.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.version = version
        self._credentials = {"username": username, "password": password}
        basic = httpx.BasicAuth(username, password) if version == "v1" else None
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout, auth=basic)
        self._token: str | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        self._client.close()

    def token(self, renew: bool = False) -> str:
        """A JWT for the user (``POST /auth/token``)."""
        with self._lock:
            if self._token is None or renew:
                resp = self._client.post("/auth/token", json=self._credentials)
                if resp.status_code not in (200, 201):
                    raise AirflowApiError("POST", "/auth/token", resp.status_code, resp.text)
                self._token = resp.json()["access_token"]
            return self._token

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        ok: tuple[int, ...] = (200, 201, 204),
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """One call under ``/api/<version>`` (or an absolute path); raises :class:`AirflowApiError`
        unless ``ok``."""
        url = path if path.startswith(("/api/", "/auth/")) else f"/api/{self.version}/" + path.lstrip("/")
        for attempt in (0, 1):
            auth = dict(headers or {})
            if self.version != "v1":
                auth["Authorization"] = f"Bearer {self.token(renew=attempt == 1)}"
            resp = self._client.request(method, url, json=json, params=params, headers=auth)
            if resp.status_code != 401 or self.version == "v1":
                break
        if resp.status_code not in ok:
            raise AirflowApiError(method, url, resp.status_code, resp.text)
        return resp

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None}).json()

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        resp = self.request("POST", path, json=body, **kwargs)
        return resp.json() if resp.content else None

    def patch(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        resp = self.request("PATCH", path, json=body, **kwargs)
        return resp.json() if resp.content else None

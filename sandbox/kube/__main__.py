"""Run the Kubernetes stand-in: ``python -m sandbox.kube --port 0 --token TOKEN --state-dir DIR``.

``python -m sandbox.kube stop --state-dir DIR`` stops the one running from ``DIR`` (``status`` prints it).

Once listening it writes ``DIR/kubeconfig`` (cluster ``http://HOST:PORT``, a user with the bearer
token, a context with namespace ``default``) and ``DIR/kube.json`` (``url``, ``token``, ``pid``,
``kubeconfig``), both atomically. The token may also come from ``SANDBOX_KUBE_TOKEN`` (keeps it out
of the process list); without either a random one is generated. SIGTERM/SIGINT stop it.

With ``--google`` it also stands in for a GKE cluster reached with a Google identity (see
``sandbox.kube.google``): ``kube.json`` then has a ``google`` entry (the token endpoint and GKE API
URL, the cluster's resource name, the service-account key file, the CA file, the endpoints).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from sandbox import registry
from sandbox.kube import google
from sandbox.kube.apiserver import DEFAULT_BOOKMARK_INTERVAL, STATE_KEY, create_app
from sandbox.kube.store import DEFAULT_HISTORY_LIMIT

TOKEN_ENV = "SANDBOX_KUBE_TOKEN"
KUBE_JSON = "kube.json"
KUBECONFIG = "kubeconfig"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (mode 0600: it holds the token)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def kubeconfig_text(url: str, token: str, namespace: str = "default") -> str:
    """A kubeconfig with one cluster, one token user and one current context."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "pathways-sandbox", "cluster": {"server": url}}],
        "users": [{"name": "pathways-sandbox", "user": {"token": token}}],
        "contexts": [
            {
                "name": "pathways-sandbox",
                "context": {
                    "cluster": "pathways-sandbox",
                    "user": "pathways-sandbox",
                    "namespace": namespace,
                },
            }
        ],
        "current-context": "pathways-sandbox",
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sandbox.kube", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--token", default=None, help=f"bearer token (default: ${TOKEN_ENV} or a random one)")
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument(
        "--history-limit",
        type=int,
        default=DEFAULT_HISTORY_LIMIT,
        help="watch events kept for resuming watches",
    )
    parser.add_argument("--bookmark-interval", type=float, default=DEFAULT_BOOKMARK_INTERVAL)
    parser.add_argument("--no-controllers", action="store_true", help="serve the API only, no simulation")
    parser.add_argument("--exit-with-parent", action="store_true", help="stop when the parent process exits")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument(
        "--google",
        action="store_true",
        help="also stand in for Google's token endpoint, the GKE API and the cluster's TLS endpoints",
    )
    parser.add_argument(
        "--token-lifetime",
        type=float,
        default=google.DEFAULT_TOKEN_LIFETIME,
        help="seconds an access token from the token endpoint is accepted (--google)",
    )
    parser.add_argument(
        "--gke-cluster",
        default=google.DEFAULT_CLUSTER,
        help="resource name of the cluster the GKE API knows (--google)",
    )
    parser.add_argument(
        "--max-watch-seconds",
        type=float,
        default=None,
        help="end every watch after this long, whatever the client asked (kube-apiserver's "
        "--min-request-timeout)",
    )
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    token = args.token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
    state_dir: Path = args.state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    tokens = google.IssuedTokens(lifetime=args.token_lifetime) if args.google else None
    app = create_app(
        token,
        controllers=not args.no_controllers,
        history_limit=args.history_limit,
        bookmark_interval=args.bookmark_interval,
        google_tokens=tokens,
        max_watch_seconds=args.max_watch_seconds,
    )
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, backlog=2048, reuse_address=True)
    await site.start()
    port = next(addr[1] for addr in runner.addresses if isinstance(addr, tuple))
    host = "127.0.0.1" if args.host in ("", "0.0.0.0") else args.host
    url = f"http://{host}:{port}"
    kubeconfig = state_dir / KUBECONFIG
    write_atomic(kubeconfig, kubeconfig_text(url, token))
    info: dict[str, Any] = {
        "url": url,
        "token": token,
        "pid": os.getpid(),
        "kubeconfig": str(kubeconfig),
        "started_at": time.time(),
    }
    google_runner = None
    if tokens is not None:
        google_runner, info["google"] = await _serve_google(args, runner, app[STATE_KEY], tokens, state_dir)
    kube_json = state_dir / KUBE_JSON
    write_atomic(kube_json, json.dumps(info, indent=2) + "\n")
    # Machine-wide, so that a stand-in left by a deleted checkout or a killed run is found and stopped.
    record = registry.register(
        "kube",
        os.getpid(),
        description=f"Kubernetes stand-in {url}",
        state_dir=state_dir,
        owner=os.getppid() if args.exit_with_parent else None,
    )
    print(f"kube stand-in listening on {url} (state dir {state_dir})", file=sys.stderr, flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watchdog = loop.create_task(_watch_parent(stop)) if args.exit_with_parent else None
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(FileNotFoundError, ValueError, OSError):
            if json.loads(kube_json.read_text()).get("pid") == os.getpid():
                kube_json.unlink()
        if watchdog is not None:
            watchdog.cancel()
        await runner.cleanup()
        if google_runner is not None:
            await google_runner.cleanup()
        registry.unregister(record)


def _bound_socket(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    return sock


async def _serve_google(
    args: argparse.Namespace,
    runner: web.AppRunner,
    state: Any,
    tokens: google.IssuedTokens,
    state_dir: Path,
) -> tuple[web.AppRunner, dict[str, Any]]:
    """The cluster's TLS endpoints on ``runner`` and the Google services on their own port."""
    host = "127.0.0.1"
    tls = google.make_tls()
    ca_file, chain_file, key_file = (state_dir / f for f in ("ca.crt", "apiserver.crt", "apiserver.key"))
    write_atomic(ca_file, tls.ca_pem.decode())
    write_atomic(chain_file, tls.chain_pem.decode())
    write_atomic(key_file, tls.key_pem.decode())
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain_file, key_file)
    endpoints = {}
    for name, address in google.ENDPOINTS.items():
        sock = _bound_socket(host)
        port = sock.getsockname()[1]
        state.endpoint_ports[port] = name
        endpoints[name] = f"{address}:{port}"
        await web.SockSite(runner, sock, ssl_context=context, backlog=2048).start()
    sock = _bound_socket(host)
    google_url = f"http://{host}:{sock.getsockname()[1]}"
    account, public_key = google.service_account_key(f"{google_url}/token")
    account_file = state_dir / "google-service-account.json"
    write_atomic(account_file, json.dumps(account, indent=2) + "\n")
    standin = google.GoogleStandin(
        tokens=tokens,
        public_key=public_key,
        cluster=args.gke_cluster,
        ca_pem=tls.ca_pem,
        endpoints=endpoints,
    )
    google_runner = web.AppRunner(standin.app(), access_log=None, shutdown_timeout=2.0)
    await google_runner.setup()
    await web.SockSite(google_runner, sock).start()
    return google_runner, {
        "url": google_url,
        "cluster": args.gke_cluster,
        "service_account_file": str(account_file),
        "ca_file": str(ca_file),
        "endpoints": endpoints,
        "token_lifetime": tokens.lifetime,
    }


async def _watch_parent(stop: asyncio.Event, interval: float = 0.5) -> None:
    """Set ``stop`` once the parent process is gone (the stand-in is then re-parented)."""
    parent = os.getppid()
    while not stop.is_set():
        await asyncio.sleep(interval)
        if os.getppid() != parent:
            stop.set()


def _manage(command: str, argv: list[str]) -> int:
    """``stop``/``status`` for the stand-in running from ``--state-dir`` (exit 1 if none is running)."""
    from sandbox.kube.launcher import connect_kube_standin

    parser = argparse.ArgumentParser(prog=f"python -m sandbox.kube {command}")
    parser.add_argument("--state-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    standin = connect_kube_standin(args.state_dir)
    if standin is None:
        print(f"no kube stand-in is running from {args.state_dir}", file=sys.stderr)
        return 1
    if command == "stop":
        standin.stop()
        print(f"stopped the kube stand-in at {standin.url} (pid {standin.pid})", file=sys.stderr)
    else:
        print(json.dumps({"url": standin.url, "pid": standin.pid, "kubeconfig": str(standin.kubeconfig)}))
    return 0


def main(argv: list[str] | None = None) -> None:
    """``[serve] --state-dir DIR ...`` runs the stand-in; ``stop``/``status --state-dir DIR`` manage one."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("stop", "status"):
        sys.exit(_manage(argv[0], argv[1:]))
    if argv and argv[0] == "serve":
        argv = argv[1:]
    args = _parse(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()

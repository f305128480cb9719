"""Run the Kubernetes stand-in: ``python -m sandbox.kube --port 0 --token TOKEN --state-dir DIR``.

``python -m sandbox.kube stop --state-dir DIR`` stops the one running from ``DIR`` (``status`` prints it).

Once listening it writes ``DIR/kubeconfig`` (cluster ``http://HOST:PORT``, a user with the bearer
token, a context with namespace ``default``) and ``DIR/kube.json`` (``url``, ``token``, ``pid``,
``kubeconfig``), both atomically. The token may also come from ``SANDBOX_KUBE_TOKEN`` (keeps it out
of the process list); without either a random one is generated. SIGTERM/SIGINT stop it.
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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from sandbox import registry
from sandbox.kube.apiserver import DEFAULT_BOOKMARK_INTERVAL, create_app
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
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    token = args.token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
    state_dir: Path = args.state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    app = create_app(
        token,
        controllers=not args.no_controllers,
        history_limit=args.history_limit,
        bookmark_interval=args.bookmark_interval,
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
    info = {
        "url": url,
        "token": token,
        "pid": os.getpid(),
        "kubeconfig": str(kubeconfig),
        "started_at": time.time(),
    }
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
        registry.unregister(record)


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

"""Reading the cluster's files from this machine's filesystem, which shares the cluster's paths."""

from __future__ import annotations

import asyncio
import os
import pwd


class LocalFiles:
    """Files on this machine, which shares the cluster's paths (REST with ``shared_fs``).

    Reads run in a worker thread so the event loop never blocks.
    """

    description = "this machine's filesystem (shared_fs)"

    def __init__(self, login: str) -> None:
        self._login = login
        self._home: str | None = None

    async def home(self) -> str | None:
        if self._home is None:
            try:
                self._home = (await asyncio.to_thread(pwd.getpwnam, self._login)).pw_dir
            except KeyError:
                return None
        return self._home

    async def read(self, path: str, tail_bytes: int | None) -> bytes | None:
        return await asyncio.to_thread(read_local, path, tail_bytes)

    async def stat(self, path: str) -> tuple[float, int] | None:
        try:
            st = await asyncio.to_thread(os.stat, path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st.st_mtime, st.st_size

    async def close(self) -> None:
        return None


def read_local(path: str, tail_bytes: int | None) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            if tail_bytes is not None:
                size = os.fstat(handle.fileno()).st_size
                handle.seek(max(0, size - tail_bytes))
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None

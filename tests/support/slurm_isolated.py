"""The isolated node of a sandbox Slurm cluster, for tests that need a node to themselves.

Every sandbox cluster (22.05 on the host, 24.11 and 26.05 in chroots) has a second node,
``SLURM_SANDBOX_ISOLATED_NODE`` (a second slurmd on this machine), with three partitions of its own:
``SLURM_SANDBOX_ISOLATED_PARTITION`` (PreemptMode REQUEUE), ``..._ISOLATED_PREEMPTIBLE_PARTITION``
(CANCEL) and ``..._ISOLATED_HIGH_PARTITION`` (PriorityTier 10, preempts the other two). Only the
tests that claim it submit there: preemption and node failure tests, which on the shared node would
end other tests' jobs (or find them in the way).

``claim_isolated_node`` takes a machine-wide lock per cluster, so that the same tests of another run
on this machine wait, with a deadline, instead of meeting each other's jobs. Holding it, whatever is
still on the isolated partitions was left by a test that died: it is cancelled, the node is resumed
if such a test left it down, and the claim waits (with a deadline) until the node is idle. On the
way out the test's jobs there are cancelled and awaited.
"""

from __future__ import annotations

import fcntl
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sandbox import registry

Run = Callable[..., subprocess.CompletedProcess[str]]


@dataclass(frozen=True)
class IsolatedNode:
    """The isolated node of one cluster and its partitions."""

    node: str
    cpus: int
    partition: str
    preemptible: str
    high: str

    @property
    def partitions(self) -> str:
        return f"{self.partition},{self.preemptible},{self.high}"

    @classmethod
    def of(cls, settings: dict[str, str]) -> IsolatedNode:
        return cls(
            node=settings["SLURM_SANDBOX_ISOLATED_NODE"],
            cpus=int(settings["SLURM_SANDBOX_ISOLATED_CPUS"]),
            partition=settings["SLURM_SANDBOX_ISOLATED_PARTITION"],
            preemptible=settings["SLURM_SANDBOX_ISOLATED_PREEMPTIBLE_PARTITION"],
            high=settings["SLURM_SANDBOX_ISOLATED_HIGH_PARTITION"],
        )


def _wait(predicate: Callable[[], object], what: str, timeout: float, seen: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {seen()}")
        time.sleep(0.2)


def _clear(isolated: IsolatedNode, run: Run, timeout: float) -> None:
    """Cancel every job on the isolated partitions and wait until the node is idle."""
    for partition in isolated.partitions.split(","):  # scancel takes one partition at a time
        run("scancel", f"--partition={partition}", check=False)

    last = ""

    def no_jobs() -> bool:
        nonlocal last
        out = run("squeue", "-h", f"--partition={isolated.partitions}", "-o", "%i %T %r", check=False)
        last = f"{out.stdout.strip()} {out.stderr.strip()}".strip()
        return out.returncode == 0 and not out.stdout.strip()

    _wait(no_jobs, f"the jobs on {isolated.node} to end", timeout, lambda: last)
    resumed_at = -100.0

    def idle() -> bool:
        nonlocal resumed_at, last
        # One line per partition of the node.
        states = set(run("sinfo", "-h", "-N", "-n", isolated.node, "-o", "%T", check=False).stdout.split())
        stuck = any(state.startswith(("down", "drain", "fail")) for state in states)
        if stuck and time.monotonic() - resumed_at > 5:
            run("scontrol", "update", f"nodename={isolated.node}", "state=resume", check=False)
            resumed_at = time.monotonic()
        last = " ".join(sorted(states))
        return states == {"idle"}

    _wait(idle, f"{isolated.node} to be idle", timeout, lambda: last)


@contextmanager
def claim_isolated_node(settings: dict[str, str], run: Run, timeout: float = 600) -> Iterator[IsolatedNode]:
    """The cluster's isolated node, idle and to this test alone until the block ends.

    ``run(*args, check=False)`` runs a Slurm command as root against the cluster.
    """
    isolated = IsolatedNode.of(settings)
    version = settings.get("SLURM_SANDBOX_VERSION", "22.05")
    locks = registry.run_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"slurm-{version}-isolated-node.lock", "a+") as lock:

        def locked() -> bool:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        what = f"the isolated node of Slurm {version}"
        _wait(locked, what, timeout, lambda: f"another test run holds {lock.name}")
        try:
            _clear(isolated, run, 60)
            yield isolated
        finally:
            try:
                _clear(isolated, run, 60)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

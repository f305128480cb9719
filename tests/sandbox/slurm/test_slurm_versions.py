"""The chroot clusters of further Slurm versions (``sandbox/slurm/versions.sh``): what each runs, that
it stays apart from the host's 22.05 cluster, and that a second ``up`` leaves healthy daemons alone."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest
from slurm_sandbox_helpers import REPO_ROOT, SANDBOX_DIR, wait_for

from sandbox.slurm.cluster import slurm_cli, start_slurm_sandbox

pytestmark = pytest.mark.slurm

VERSIONS_SCRIPT = SANDBOX_DIR / "versions.sh"
# What each Debian release ships (packages.debian.org: trixie 24.11.5, forky 26.05.5) and the API
# versions its slurmrestd serves (one data_parser plugin per version).
EXPECTED = {
    "24.11": ("24.11.5", ["v0.0.42", "v0.0.41", "v0.0.40"], True),
    "26.05": ("26.05.5", ["v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42"], False),
}
HOST_PORTS = {"6817", "6818", "6819", "6820", "2222"}


def _versions(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(VERSIONS_SCRIPT), *args], capture_output=True, text=True, timeout=900, cwd=REPO_ROOT
    )


def _cli(settings: dict[str, str], *args: str) -> str:
    proc = subprocess.run([*slurm_cli(settings), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _openapi_versions(settings: dict[str, str]) -> set[str]:
    token = Path(settings["SLURM_SANDBOX_JWT_TOKEN_FILE"]).read_text().strip()
    request = urllib.request.Request(
        f"{settings['SLURM_SANDBOX_REST_URL']}/openapi/v3",
        headers={"X-SLURM-USER-NAME": settings["SLURM_SANDBOX_USER"], "X-SLURM-USER-TOKEN": token},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        paths = json.load(response)["paths"]
    return {part for path in paths for part in path.split("/") if part.startswith("v0.0.")}


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_version_cluster(version: str) -> None:
    settings = start_slurm_sandbox(timeout=900, version=version)
    release, api_versions, accounting = EXPECTED[version]
    assert settings["SLURM_SANDBOX_SLURM_RELEASE"] == release
    assert _cli(settings, "scontrol", "--version").split() == ["slurm-wlm", release]
    assert settings["SLURM_SANDBOX_REST_API_VERSIONS"].split(",") == api_versions
    assert settings["SLURM_SANDBOX_REST_API_VERSION"] == api_versions[0]
    assert _openapi_versions(settings) >= set(api_versions)
    ports = {settings[k] for k in ("SLURM_SANDBOX_CTLD_PORT", "SLURM_SANDBOX_SLURMD_PORT")}
    ports |= {settings["SLURM_SANDBOX_SSH_PORT"], settings["SLURM_SANDBOX_REST_URL"].rsplit(":", 1)[1]}
    assert len(ports) == 4 and not ports & HOST_PORTS

    config = _cli(settings, "scontrol", "show", "config")
    assert f"MinJobAge               = {settings['SLURM_SANDBOX_MIN_JOB_AGE']} sec" in config
    assert (settings["SLURM_SANDBOX_ACCOUNTING"] == "1") is accounting
    if accounting:
        assert "accounting_storage/slurmdbd" in config
        clusters = _cli(settings, "sacctmgr", "-n", "-P", "show", "cluster", "format=cluster").split()
        assert settings["SLURM_SANDBOX_CLUSTER_NAME"] in clusters
    else:
        assert "accounting_storage/slurmdbd" not in config

    # Its own munge key: a credential of the host's munged does not open here.
    host_cred = subprocess.run(["munge", "-n"], capture_output=True, text=True, check=True).stdout
    decoded = subprocess.run(
        ["chroot", settings["SLURM_SANDBOX_CHROOT"], "unmunge"],
        input=host_cred,
        capture_output=True,
        text=True,
    )
    assert decoded.returncode != 0

    # A second run changes nothing: nothing is (re)started, the same daemons run.
    pids = {
        p.name: p.read_text().strip()
        for p in (Path(settings["SLURM_SANDBOX_STATE_DIR"]) / "run").glob("*.pid")
    }
    node = settings["SLURM_SANDBOX_NODES"]
    assert {f"slurmd-{node}.pid", f"slurmd-{settings['SLURM_SANDBOX_ISOLATED_NODE']}.pid"} <= set(pids)
    proc = _versions("up", version)
    assert proc.returncode == 0, proc.stderr
    assert "starting" not in proc.stderr
    assert pids == {
        p.name: p.read_text().strip()
        for p in (Path(settings["SLURM_SANDBOX_STATE_DIR"]) / "run").glob("*.pid")
    }
    status = _versions("status", version).stdout
    assert "=down" not in status and status.startswith(f"{version}:")


def test_chroot_node_comes_back_after_a_drain() -> None:
    settings = start_slurm_sandbox(timeout=900, version="26.05")
    node = settings["SLURM_SANDBOX_NODES"]
    _cli(settings, "scontrol", "update", f"nodename={node}", "state=drain", "reason=sandbox-test")
    try:
        wait_for(lambda: "drain" in _cli(settings, "sinfo", "-h", "-N", "-o", "%T"), "the node to drain")
        proc = _versions("up", "26.05")
        assert proc.returncode == 0, proc.stderr
        assert "resuming it" in proc.stderr
    finally:
        subprocess.run(
            [*slurm_cli(settings), "scontrol", "update", f"nodename={node}", "state=resume"], check=False
        )

"""The launcher and the command line: state files, reuse, stop."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import yaml

from sandbox.kube.launcher import REPO_ROOT, connect_kube_standin, ensure_kube_standin, start_kube_standin


def test_state_files_reuse_and_cli_stop(tmp_path):
    standin = start_kube_standin(tmp_path, token="launcher-token", detach=True)
    try:
        info = json.loads((tmp_path / "kube.json").read_text())
        assert info == {**info, "url": standin.url, "token": "launcher-token", "pid": standin.pid}
        assert stat.S_IMODE((tmp_path / "kube.json").stat().st_mode) == 0o600
        config = yaml.safe_load(standin.kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == standin.url
        assert config["users"][0]["user"]["token"] == "launcher-token"
        assert config["contexts"][0]["context"]["namespace"] == "default"
        assert "launcher-token" not in " ".join(standin.process.args)  # passed by environment
        reused = connect_kube_standin(tmp_path)
        assert reused is not None and reused.pid == standin.pid and reused.token == "launcher-token"
        assert ensure_kube_standin(tmp_path).pid == standin.pid
        assert reused.control("state")["openWatches"] == 0
        cli = [sys.executable, "-m", "sandbox.kube"]
        status = subprocess.run(
            [*cli, "status", "--state-dir", str(tmp_path)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(status.stdout)["pid"] == standin.pid
        subprocess.run(
            [*cli, "stop", "--state-dir", str(tmp_path)], cwd=REPO_ROOT, check=True, capture_output=True
        )
        standin.process.wait(10)
        assert connect_kube_standin(tmp_path) is None and not (tmp_path / "kube.json").exists()
    finally:
        standin.stop()

"""`python -m grpo_trainer serve` as a real process on a loopback port: it
serves, trains a job over HTTP, and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from conftest import job_body, make_trajectory

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(method: str, url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_serve_trains_over_http_and_stops_on_sigterm(tmp_path, model_dir, tiny):
    model, tok = tiny
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "grpo_trainer", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--data-dir", str(tmp_path / "data"), "--model", f"tiny={model_dir}", "--seed", "7"],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if _call("GET", base + "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "trainer did not become healthy"
            time.sleep(0.2)

        body = job_body([make_trajectory(model, tok, 1.0, seed=201)])
        assert _call("POST", base + "/v1/jobs", body) == (
            202,
            {"id": body["id"], "state": "queued", "progress": 0.0},
        )
        code, err = _call("POST", base + "/v1/jobs", {**body, "lora": {"rank": "eight"}})
        assert code == 400 and err["error"].startswith("lora.rank:")
        while True:
            code, job = _call("GET", base + "/v1/jobs/" + body["id"])
            assert code == 200
            if job["state"] not in ("queued", "running"):
                break
            assert time.monotonic() < deadline + 60
            time.sleep(0.1)
        assert job["state"] == "succeeded", job
        assert (
            Path(job["adapter"]["path"])
            == (tmp_path / "data" / "adapters" / "run-step-0001").resolve()
        )
        with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
            assert b'grpo_trainer_jobs_total{state="succeeded"} 1.0' in r.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
    out = (tmp_path / "server.log").read_text()
    assert code == 0, out
    assert "Application shutdown complete" in out


def test_serve_rejects_a_model_dir_without_config(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "grpo_trainer", "serve", "--data-dir", str(tmp_path),
         "--model", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2
    assert "has no config.json" in r.stderr

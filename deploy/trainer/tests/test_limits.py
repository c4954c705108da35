"""What the trainer refuses and bounds: ids that would name another job's
records, parent adapters outside its directories, requests without its key,
a full queue, a job that keeps killing it; and the adapters a save killed
between its renames leaves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import job_body, make_trajectory
from fastapi.testclient import TestClient
from test_api import _write_record, make_app, wait

from grpo_trainer.api import HASHED_ID_RE, JobRequest
from grpo_trainer.jobs import JOB_FILE, JobManager, QueueFull, job_dir_name

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def trajs(tiny):
    model, tok = tiny
    return [make_trajectory(model, tok, 1.0, seed=301)]


def _post(client, body, **headers):
    return client.post("/v1/jobs", json=body, headers=headers)


def test_the_hashed_form_of_a_long_id_cannot_be_posted(tmp_path, model_dir, trajs):
    long_id = "run/" + "x" * 250
    hashed = job_dir_name(long_id)
    assert HASHED_ID_RE.fullmatch(hashed)  # the shape refused is the one made
    with TestClient(make_app(tmp_path, model_dir)) as client:
        for job_id in (hashed, hashed.upper()):
            r = _post(client, job_body(trajs, id=job_id, output_adapter="b"))
            assert r.status_code == 400, r.text
            assert r.json()["error"].startswith(
                "id: Value error, sha256-<64 hex digits> is the trainer's name for the records"
            )
        assert not (tmp_path / "jobs" / hashed).exists()
        # Other ids of that look are ids like any other.
        assert _post(client, job_body(trajs, id="sha256-" + "0" * 63)).status_code == 202


def test_parent_adapters_are_read_only_from_the_trainers_directories(tmp_path, model_dir, trajs):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "adapter_config.json").write_text("{}")
    with TestClient(make_app(tmp_path / "data", model_dir)) as client:
        adapters = tmp_path / "data" / "adapters"
        assert _post(client, job_body(trajs)).status_code == 202
        parent = wait(client, "run/step-0001")["adapter"]
        # A symlink in the adapters directory to a directory outside it.
        (adapters / "link").symlink_to(outside)

        def refused(path):
            body = job_body(
                trajs,
                id="run/step-0002",
                output_adapter="run-step-0002",
                parent_adapter={"name": "p", "path": path},
            )
            r = _post(client, body)
            return r.status_code, r.json().get("error", "").replace(repr(path), "PATH")

        want = (
            400,
            "parent_adapter.path PATH is refused: a parent adapter is read only from this "
            f"trainer's adapters directory ({adapters}/<name>) or a served model's directory",
        )
        for path in (
            str(outside),  # exists
            str(tmp_path / "nowhere"),  # does not
            "/etc",
            str(adapters / ".." / ".." / "outside"),
            str(adapters / "link"),
        ):
            assert refused(path) == want, path
        assert client.get("/v1/jobs/run/step-0002").status_code == 404

        # Inside: the trainer's adapters (a lineage), and a model's directory.
        ok = job_body(
            trajs,
            id="run/step-0002",
            output_adapter="run-step-0002",
            parent_adapter={"name": "run-step-0001", "path": parent["path"]},
        )
        assert _post(client, ok).status_code == 202
        job = wait(client, "run/step-0002")
        assert job["state"] == "succeeded" and job["metrics"]["optimizer_step"] == 2
        in_model = job_body(
            trajs,
            id="run/step-0003",
            output_adapter="run-step-0003",
            parent_adapter={"name": "m", "path": str(model_dir)},
        )
        assert _post(client, in_model).status_code == 202
        failed = wait(client, "run/step-0003")
        assert failed["state"] == "failed"
        assert failed["error"].startswith(f"parent adapter m: read {model_dir}")


def test_a_key_is_required_but_for_healthz_and_metrics(tmp_path, model_dir, trajs):
    app = make_app(tmp_path, model_dir)
    app.state.config.api_key = "s3cret"
    with TestClient(app) as client:
        body = job_body(trajs)
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "s3cret"}):
            r = _post(client, body, **headers)
            assert r.status_code == 401, headers
            assert r.headers["www-authenticate"] == "Bearer"
            assert "Authorization: Bearer <key>" in r.json()["error"]
            assert client.get("/v1/jobs/run/step-0001", headers=headers).status_code == 401
        assert client.get("/healthz").status_code == 200
        assert client.get("/metrics").status_code == 200
        key = {"authorization": "Bearer s3cret"}
        assert _post(client, body, **key).status_code == 202
        assert client.get("/v1/jobs/run/step-0001", headers=key).status_code == 200


def _serve(tmp_path, *args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "grpo_trainer", "serve", "--data-dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=120,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "trainer"])
def test_serve_beyond_loopback_refuses_to_start_without_a_key(tmp_path, host):
    r = _serve(tmp_path, "--host", host)
    assert r.returncode == 2
    assert f"--host {host} listens beyond loopback and needs a key: give --api-key-env" in r.stderr


def test_serve_refuses_an_unset_key_variable(tmp_path):
    env = {"GRPO_TEST_TRAINER_KEY": ""}
    r = _serve(tmp_path, "--host", "0.0.0.0", "--api-key-env", "GRPO_TEST_TRAINER_KEY", env=env)
    assert r.returncode == 2
    assert "--api-key-env GRPO_TEST_TRAINER_KEY: the environment variable" in r.stderr
    assert "is unset or empty" in r.stderr


def _body(job_id, output_adapter="a"):
    return {
        "id": job_id,
        "output_adapter": output_adapter,
        "trajectories": [{"messages_and_choices": [{"role": "user"}], "advantage": 1.0}],
    }


def _never(req, ctl):
    raise AssertionError("not started")


def test_the_queue_is_bounded_and_holds_no_request(tmp_path):
    m = JobManager(tmp_path / "jobs", _never, max_queued=2)
    m.open()
    for i in range(2):
        body = _body(f"j{i}", f"a{i}")
        assert m.create(JobRequest.model_validate(body), json.dumps(body).encode())[1]
    extra = _body("j2", "a2")
    with pytest.raises(QueueFull, match=r"queue is full: 2 jobs wait \(--max-queued 2\)"):
        m.create(JobRequest.model_validate(extra), json.dumps(extra).encode())
    # A known id is still answered: the same job, not a new one.
    known = _body("j0", "a0")
    job, created = m.create(JobRequest.model_validate(known), b"")
    assert not created and job.state == "queued"
    # The requests are on disk only.
    held = [v for e in m._jobs.values() for v in vars(e).values()]
    assert not any(isinstance(v, (JobRequest, bytes)) for v in held)
    for i in range(2):
        request = tmp_path / "jobs" / f"j{i}" / "request.json"
        assert json.loads(request.read_bytes())["output_adapter"] == f"a{i}"


def test_a_full_queue_is_answered_429(tmp_path, model_dir, trajs):
    app = make_app(tmp_path, model_dir)
    app.state.config.max_queued = 1
    app.state.jobs.max_queued = 1
    with TestClient(app) as client:
        long = job_body(trajs, id="long", output_adapter="long", hyperparameters={"epochs": 1000})
        assert _post(client, long).status_code == 202
        wait(client, "long", states=("running",))
        assert _post(client, job_body(trajs, id="q1", output_adapter="q1")).status_code == 202
        r = _post(client, job_body(trajs, id="q2", output_adapter="q2"))
        assert r.status_code == 429
        assert r.headers["retry-after"] == "60"
        assert r.json()["error"].startswith("the trainer's queue is full: 1 jobs wait")
        assert client.get("/v1/jobs/q2").status_code == 404
        for job_id in ("q1", "long"):
            client.delete(f"/v1/jobs/{job_id}")


def test_a_job_running_at_each_death_is_failed_after_3_restarts(tmp_path):
    # The records a trainer killed mid-job leaves: running, with the
    # restarts counted so far (none in a record older than the count).
    for job_id, restarts in (("r0", None), ("r2", 2), ("r3", 3)):
        _write_record(
            tmp_path, {"id": job_id, "state": "running"}, json.dumps(_body(job_id)).encode()
        )
        if restarts is not None:
            f = tmp_path / "jobs" / job_id / JOB_FILE
            rec = json.loads(f.read_text())
            f.write_text(json.dumps({**rec, "output_adapter": job_id, "restarts": restarts}))
    _write_record(tmp_path, {"id": "q", "state": "queued"}, json.dumps(_body("q")).encode())
    m = JobManager(tmp_path / "jobs", _never)
    m.open()

    def record(job_id):
        return json.loads((tmp_path / "jobs" / job_id / JOB_FILE).read_text())

    assert [m.get(j).state for j in ("r0", "r2", "r3", "q")] == [
        "queued",
        "queued",
        "failed",
        "queued",
    ]
    assert [record(j)["restarts"] for j in ("r0", "r2", "r3", "q")] == [1, 3, 4, 0]
    assert m.get("r3").error == (
        "the trainer stopped 4 times while this job ran (killed: out of memory?); "
        "not run again after 3 restarts"
    )
    # Started again and killed again: r2 has had its 3 restarts too.
    f = tmp_path / "jobs" / "r2" / JOB_FILE
    rec = record("r2")
    rec["job"]["state"] = "running"
    f.write_text(json.dumps(rec))
    again = JobManager(tmp_path / "jobs", _never)
    again.open()
    assert again.get("r2").state == "failed"
    assert again.get("r0").state == "queued"


def test_start_settles_adapters_a_save_left_between_its_renames(tmp_path, model_dir):
    # A save renames the adapter it replaces to .old-<name>-<hex>, then its
    # new one into place, then removes the old. Killed after the second
    # rename, the old one is left beside the new: removed. Killed between
    # the renames, the name is empty: the old adapter is put back.
    adapters = tmp_path / "adapters"
    for d, content in (
        ("run-step-0001", b"new"),
        (".old-run-step-0001-0123abcd", b"old"),
        (".old-run-step-0002-4567ef01", b"old 2"),
    ):
        (adapters / d).mkdir(parents=True)
        (adapters / d / "adapter_model.safetensors").write_bytes(content)
    with TestClient(make_app(tmp_path, model_dir)) as client:
        assert client.get("/healthz").status_code == 200
    assert sorted(p.name for p in adapters.iterdir()) == ["run-step-0001", "run-step-0002"]
    assert (adapters / "run-step-0001" / "adapter_model.safetensors").read_bytes() == b"new"
    assert (adapters / "run-step-0002" / "adapter_model.safetensors").read_bytes() == b"old 2"


def test_a_job_stopped_by_shutdown_is_queued_not_a_restart(tmp_path, model_dir, trajs):
    with TestClient(make_app(tmp_path, model_dir)) as client:
        long = job_body(trajs, id="long", output_adapter="long", hyperparameters={"epochs": 1000})
        assert _post(client, long).status_code == 202
        wait(client, "long", states=("running",))
    rec = json.loads((tmp_path / "jobs" / "long" / JOB_FILE).read_text())
    assert rec["job"]["state"] == "queued" and rec["restarts"] == 0

"""The job API over HTTP (FastAPI's TestClient runs the app's lifespan and
its worker thread): idempotent create, states, cancel, restart, malformed
input, /healthz and /metrics."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import job_body, make_trajectory
from fastapi.testclient import TestClient

from grpo_trainer import train as train_module
from grpo_trainer.app import Config, create_app
from grpo_trainer.jobs import JOB_FILE, REQUEST_FILE, job_dir_name
from grpo_trainer.models import ModelStore
from grpo_trainer.train import TrainOptions


def make_app(data_dir: Path, model_dir: Path, default: bool = False):
    models = ModelStore(
        paths={} if default else {"tiny": model_dir}, default=model_dir if default else None
    )
    return create_app(
        Config(data_dir=data_dir, models=models, train=TrainOptions(micro_batch_size=4))
    )


def wait(
    client: TestClient, job_id: str, states=("succeeded", "failed", "cancelled"), timeout=60.0
):
    deadline = time.monotonic() + timeout
    while True:
        r = client.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, r.text
        job = r.json()
        if job["state"] in states:
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job['state']}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def trajs(tiny) -> list[dict[str, Any]]:
    model, tok = tiny
    return [make_trajectory(model, tok, a, seed=s) for s, a in [(101, 1.0), (102, -1.0)]]


def test_job_lifecycle_and_idempotent_create(tmp_path, model_dir, trajs):
    body = job_body(trajs)
    with TestClient(make_app(tmp_path, model_dir)) as client:
        assert client.get("/healthz").status_code == 200
        r = client.post("/v1/jobs", json=body)
        assert r.status_code == 202, r.text
        assert r.json() == {"id": "run/step-0001", "state": "queued", "progress": 0.0}
        assert r.headers["location"] == "/v1/jobs/run/step-0001"

        job = wait(client, "run/step-0001")
        assert job["state"] == "succeeded", job
        assert job["progress"] == 1.0
        adapter = Path(tmp_path / "adapters" / "run-step-0001").resolve()
        assert job["adapter"] == {"name": "run-step-0001", "path": str(adapter)}
        assert (adapter / "adapter_config.json").is_file()
        assert (adapter / "adapter_model.safetensors").is_file()
        m = job["metrics"]
        assert set(m) >= {"loss", "kl", "grad_norm", "clip_fraction", "tokens"}
        assert m["tokens"] == 4 * 6 and m["grad_norm"] > 0
        # One epoch from a fresh adapter (B = 0) is the sampler itself: the
        # server lined every sampled logprob up with its token.
        assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and m["clip_fraction"] == 0
        assert "error" not in job

        # The same id again, even with another body, is the same job: it
        # does not train twice.
        mtime = (adapter / "adapter_model.safetensors").stat().st_mtime_ns
        again = job_body(trajs, output_adapter="other", base_model="not-served")
        r = client.post("/v1/jobs", json=again)
        assert r.status_code == 200
        assert r.json() == job
        time.sleep(0.2)
        assert wait(client, "run/step-0001") == job
        assert (adapter / "adapter_model.safetensors").stat().st_mtime_ns == mtime
        assert not (tmp_path / "adapters" / "other").exists()

        metrics = client.get("/metrics").text
        assert 'grpo_trainer_jobs_total{state="succeeded"} 1.0' in metrics
        assert 'grpo_trainer_job_duration_seconds_count{state="succeeded"} 1.0' in metrics
        assert "grpo_trainer_tokens_trained_total 24.0" in metrics
        assert "grpo_trainer_loss " in metrics


def test_unknown_job_is_404(tmp_path, model_dir):
    with TestClient(make_app(tmp_path, model_dir)) as client:
        for method in ("get", "delete"):
            r = getattr(client, method)("/v1/jobs/nope/step-1")
            assert r.status_code == 404
            assert r.json() == {"error": "job 'nope/step-1' not found"}


@pytest.mark.parametrize(
    ("change", "want"),
    [
        (lambda b: b.pop("output_adapter"), "output_adapter: Field required"),
        (
            lambda b: b.update(output_adapter="../evil"),
            "output_adapter: Value error, want 1 to 200",
        ),
        (lambda b: b.update(id=""), "id: String should have at least 1 character"),
        (
            lambda b: b["lora"].update(rank=-1),
            "lora.rank: -1 is out of range; accepted: 0 to 256 (0 takes 8)",
        ),
        (
            lambda b: b["lora"].update(alpha=1e39),
            "lora.alpha: 1e+39 is out of range; accepted: 0 to 4096 (0 takes twice the rank)",
        ),
        (lambda b: b["lora"].update(target_modules=["q proj"]), "lora.target_modules: Value error"),
        (
            lambda b: b["hyperparameters"].update(epsilon=1.5),
            "hyperparameters.epsilon: 1.5 is out of range; accepted: 0 <= epsilon < 1 "
            "(0 takes 0.2)",
        ),
        # Values torch cannot compute with (or that train the adapter to
        # inf) are refused before the job is accepted, naming the field.
        (
            lambda b: b["hyperparameters"].update(learning_rate=1e39),
            "hyperparameters.learning_rate: 1e+39 is out of range; accepted: 0 to 1 "
            "(0 takes 1e-05)",
        ),
        (
            lambda b: b["hyperparameters"].update(learning_rate=-1e-5),
            "hyperparameters.learning_rate: -1e-05 is out of range",
        ),
        (
            lambda b: b["hyperparameters"].update(epsilon_high=1e39),
            "hyperparameters.epsilon_high: 1e+39 is out of range; accepted: 0 to 100 "
            "(0 takes epsilon)",
        ),
        (
            lambda b: b["hyperparameters"].update(kl_beta=1e39),
            "hyperparameters.kl_beta: 1e+39 is out of range; accepted: 0 to 1000",
        ),
        (
            lambda b: b["hyperparameters"].update(epochs=1001),
            "hyperparameters.epochs: 1001 is out of range; accepted: 0 to 1000 (0 takes 1)",
        ),
        (
            lambda b: b["hyperparameters"].update(mini_batches=4097),
            "hyperparameters.mini_batches: 4097 is out of range; accepted: 0 to 4096 (0 takes 1)",
        ),
        (
            lambda b: b["hyperparameters"].update(mini_batches=-1),
            "hyperparameters.mini_batches: -1 is out of range",
        ),
        (
            lambda b: b["hyperparameters"].update(warmup_steps=-1),
            "hyperparameters.warmup_steps: -1 is out of range; accepted: 0 to 1000000",
        ),
        (
            lambda b: b["hyperparameters"].update(reset_optimizer="maybe"),
            "hyperparameters.reset_optimizer: Input should be a valid boolean",
        ),
        (
            lambda b: b["trajectories"][1].update(advantage=1e300),
            "trajectories.1.advantage: 1e+300 is out of range; accepted: -1e+06 to 1e+06",
        ),
        (
            lambda b: b["trajectories"][0].update(advantage=float("inf")),
            "trajectories.0.advantage: inf is out of range; accepted: -1e+06 to 1e+06",
        ),
        (
            lambda b: b["trajectories"][0].update(advantage=float("-inf")),
            "trajectories.0.advantage: -inf is out of range",
        ),
        (
            lambda b: b["trajectories"][0].update(advantage=float("nan")),
            "trajectories.0.advantage: nan is out of range",
        ),
        (
            lambda b: b["hyperparameters"].update(learning_rate=float("nan")),
            "hyperparameters.learning_rate: nan is out of range",
        ),
        (
            lambda b: b["hyperparameters"].update(epochs="x"),
            "hyperparameters.epochs: Input should be a valid",
        ),
        (
            lambda b: b["trajectories"][1].pop("advantage"),
            "trajectories.1.advantage: Field required",
        ),
        (
            lambda b: b["trajectories"][0].update(messages_and_choices=5),
            "trajectories.0.messages_and_choices",
        ),
        (
            lambda b: b.update(base_model="Qwen/Qwen3-14B"),
            "base_model 'Qwen/Qwen3-14B': no local model",
        ),
        (lambda b: b.update(trajectories=[]), "trajectories: List should have at least 1 item"),
        (
            lambda b: b["trajectories"][0].update(messages_and_choices=[]),
            "trajectories.0.messages_and_choices: List should have at least 1 item",
        ),
    ],
)
def test_malformed_create_names_the_field(tmp_path, model_dir, trajs, change, want):
    body = json.loads(json.dumps(job_body(trajs)))
    change(body)
    with TestClient(make_app(tmp_path, model_dir)) as client:
        # json.dumps writes inf and nan as Infinity and NaN, which Python's
        # JSON reader (the server's) takes.
        r = client.post(
            "/v1/jobs", content=json.dumps(body), headers={"content-type": "application/json"}
        )
        assert r.status_code == 400, r.text
        assert want in r.json()["error"]
        assert client.get(f"/v1/jobs/{body.get('id') or 'x'}").status_code == 404


def test_jobs_the_orchestrator_sends_are_accepted():
    # Go's defaults (config/defaults.go) and the largest values accepted:
    # the bounds refuse only the absurd.
    from grpo_trainer.api import JobRequest

    def job(lora, hp, advantages):
        return {
            "id": "run/step-0001",
            "output_adapter": "run-step-0001",
            "lora": lora,
            "hyperparameters": hp,
            "trajectories": [
                {"messages_and_choices": [{"role": "user"}], "advantage": a} for a in advantages
            ],
        }

    go_defaults = job(
        {"rank": 8, "alpha": 16},
        {"learning_rate": 5e-6, "epsilon": 0.2, "epsilon_high": 0.2, "kl_beta": 0.0, "epochs": 1},
        [1.2247, -0.8165, 0.0],
    )
    largest = job(
        {"rank": 256, "alpha": 4096},
        {
            "learning_rate": 1,
            "epsilon": 0.999,
            "epsilon_high": 100,
            "kl_beta": 1000,
            "epochs": 1000,
            "mini_batches": 4096,
            "warmup_steps": 1_000_000,
            "reset_optimizer": True,
        },
        [1e6, -1e6],
    )
    for body in (go_defaults, largest):
        req = JobRequest.model_validate_json(json.dumps(body))
        got = req.hyperparameters.model_dump()
        assert {k: got[k] for k in body["hyperparameters"]} == body["hyperparameters"]
        assert [t.advantage for t in req.trajectories] == [
            t["advantage"] for t in body["trajectories"]
        ]


def test_body_that_is_not_json(tmp_path, model_dir):
    with TestClient(make_app(tmp_path, model_dir)) as client:
        r = client.post(
            "/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert r.status_code == 400
        assert "JSON" in r.json()["error"]


def test_default_model_serves_any_base_model(tmp_path, model_dir, trajs):
    with TestClient(make_app(tmp_path, model_dir, default=True)) as client:
        r = client.post("/v1/jobs", json=job_body(trajs[:1], base_model="Qwen/Qwen3-14B"))
        assert r.status_code == 202
        assert wait(client, "run/step-0001")["state"] == "succeeded"


def test_trajectories_without_token_ids_are_retokenised(tmp_path, model_dir, trajs):
    bare = json.loads(json.dumps(trajs))
    for t in bare:
        for it in t["messages_and_choices"]:
            it.pop("token_ids", None)
            it.pop("prompt_token_ids", None)
    with TestClient(make_app(tmp_path, model_dir)) as client:
        assert client.post("/v1/jobs", json=job_body(bare)).status_code == 202
        job = wait(client, "run/step-0001")
        assert job["state"] == "succeeded", job
        assert job["metrics"]["tokens"] == 24
        assert job["metrics"]["ratio_mean"] == pytest.approx(1.0, abs=1e-5)


def test_bad_trajectory_fails_the_job_naming_it(tmp_path, model_dir, trajs):
    bad = json.loads(json.dumps(trajs))
    bad[1]["messages_and_choices"][2]["token_ids"][0] += 1
    with TestClient(make_app(tmp_path, model_dir)) as client:
        assert client.post("/v1/jobs", json=job_body(bad)).status_code == 202
        job = wait(client, "run/step-0001")
        assert job["state"] == "failed"
        assert job["error"].startswith(
            "trajectory 1, turn 0 (messages_and_choices[2]): token mismatch"
        )
        assert "adapter" not in job
        assert not (tmp_path / "adapters" / "run-step-0001").exists()
        # The worker goes on with the next job.
        assert client.post("/v1/jobs", json=job_body(trajs, id="run/step-0002")).status_code == 202
        assert wait(client, "run/step-0002")["state"] == "succeeded"
        assert 'grpo_trainer_jobs_total{state="failed"} 1.0' in client.get("/metrics").text


def test_cancel_running_and_queued_jobs(tmp_path, model_dir, trajs):
    long = job_body(trajs, id="long", output_adapter="long", hyperparameters={"epochs": 1000})
    with TestClient(make_app(tmp_path, model_dir)) as client:
        assert client.post("/v1/jobs", json=long).status_code == 202
        queued = job_body(trajs, id="queued", output_adapter="queued")
        assert client.post("/v1/jobs", json=queued).status_code == 202
        wait(client, "long", states=("running",))
        assert client.get("/v1/jobs/queued").json()["state"] == "queued"  # one at a time

        r = client.delete("/v1/jobs/queued")
        assert r.status_code == 200 and r.json()["state"] == "cancelled"
        r = client.delete("/v1/jobs/long")
        assert r.status_code == 200 and r.json()["state"] == "cancelled"

        # The worker is free again: a new job runs to the end.
        assert client.post("/v1/jobs", json=job_body(trajs, id="next")).status_code == 202
        assert wait(client, "next")["state"] == "succeeded"
        for job_id in ("long", "queued"):
            job = client.get(f"/v1/jobs/{job_id}").json()
            assert job["state"] == "cancelled" and "adapter" not in job
            assert not (tmp_path / "adapters" / job_id).exists()
        # Cancelling a finished job leaves it as it is.
        assert client.delete("/v1/jobs/next").json()["state"] == "succeeded"


def _write_record(data_dir: Path, job: dict[str, Any], request: bytes) -> None:
    d = data_dir / "jobs" / job_dir_name(job["id"])
    d.mkdir(parents=True)
    (d / REQUEST_FILE).write_bytes(request)
    rec = {"job": job, "created": time.time(), "updated": time.time()}
    (d / JOB_FILE).write_text(json.dumps(rec))


def test_restart_answers_old_jobs_and_reruns_unfinished(tmp_path, model_dir, trajs):
    with TestClient(make_app(tmp_path, model_dir)) as client:
        assert client.post("/v1/jobs", json=job_body(trajs)).status_code == 202
        done = wait(client, "run/step-0001")
        assert done["state"] == "succeeded"
        # A long job interrupted by the shutdown at the end of this block.
        long = job_body(
            trajs, id="run/step-0002", output_adapter="s2", hyperparameters={"epochs": 1000}
        )
        assert client.post("/v1/jobs", json=long).status_code == 202
        wait(client, "run/step-0002", states=("running",))
    # Stopped by the shutdown, not a death: queued again (no restart counted).
    rec = json.loads((tmp_path / "jobs" / job_dir_name("run/step-0002") / JOB_FILE).read_text())
    assert rec["job"]["state"] == "queued" and rec["restarts"] == 0

    # What a trainer killed mid-job leaves behind, and a record whose
    # request did not survive.
    crashed = job_body(trajs, id="run/step-0003", output_adapter="s3")
    _write_record(
        tmp_path,
        {"id": "run/step-0003", "state": "running", "progress": 0.4},
        json.dumps(crashed).encode(),
    )
    _write_record(tmp_path, {"id": "run/step-0004", "state": "queued"}, b"{truncated")

    with TestClient(make_app(tmp_path, model_dir)) as client:
        assert client.get("/v1/jobs/run/step-0001").json() == done
        broken = client.get("/v1/jobs/run/step-0004").json()
        assert broken["state"] == "failed"
        assert broken["error"].startswith("job request record unreadable after restart")
        # The interrupted job runs again first (it is the oldest); cut it
        # short, then the crashed one runs to the end.
        wait(client, "run/step-0002", states=("running",))
        assert client.get("/v1/jobs/run/step-0003").json()["state"] == "queued"
        assert client.delete("/v1/jobs/run/step-0002").json()["state"] == "cancelled"
        job = wait(client, "run/step-0003")
        assert job["state"] == "succeeded", job
        assert job["adapter"]["path"] == str((tmp_path / "adapters" / "s3").resolve())


@pytest.mark.parametrize("job_id", [".", "..", ".x", "run/.."])
def test_ids_with_dots_survive_a_restart(tmp_path, job_id):
    # "." and ".." must not name the jobs directory or its parent, and a
    # record directory must not be hidden from the reload (which skips
    # dot-names, where temporary files live).
    from grpo_trainer.api import JobRequest
    from grpo_trainer.jobs import JobManager

    def never(req, ctl):
        raise AssertionError("not started")

    body = {
        "id": job_id,
        "output_adapter": "a",
        "trajectories": [{"messages_and_choices": [{"role": "user"}], "advantage": 1.0}],
    }
    req = JobRequest.model_validate(body)
    jobs = tmp_path / "data" / "jobs"
    m = JobManager(jobs, never)
    m.open()
    assert m.create(req, json.dumps(body).encode())[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["jobs"]
    assert all(p.is_dir() for p in jobs.iterdir())

    again = JobManager(jobs, never)
    again.open()
    assert again.get(job_id).state == "queued"


def test_a_job_does_not_replace_another_jobs_adapter(tmp_path, model_dir, trajs, caplog):
    # The orchestrator names each step's adapter after its job (run/step-3
    # makes run-step-0003): another job naming an adapter that a job made,
    # or is to make, is refused (409) naming the adapter and that job,
    # instead of replacing it silently.
    adapters = tmp_path / "adapters"
    adapter = (adapters / "run-step-0001").resolve()
    other = job_body(trajs, id="other/step-0001")
    with TestClient(make_app(tmp_path, model_dir)) as client:
        long = job_body(trajs, hyperparameters={"epochs": 1000})
        assert client.post("/v1/jobs", json=long).status_code == 202
        wait(client, "run/step-0001", states=("running",))
        r = client.post("/v1/jobs", json=other)
        assert r.status_code == 409, r.text
        assert r.json()["error"] == (
            "output_adapter 'run-step-0001' is taken: job 'run/step-0001' (running) is to make "
            "it; a job does not replace another job's adapter: give this job another "
            "output_adapter"
        )
        assert client.delete("/v1/jobs/run/step-0001").json()["state"] == "cancelled"
        wait(client, "run/step-0001")

        # A cancelled job made nothing: the name is free.
        assert client.post("/v1/jobs", json=job_body(trajs, id="run/step-1")).status_code == 202
        assert wait(client, "run/step-1")["state"] == "succeeded"
        made = (adapter / "adapter_model.safetensors").read_bytes()
        assert json.loads((adapter / "grpo_job.json").read_text()) == {"job_id": "run/step-1"}
        r = client.post("/v1/jobs", json=other)
        assert r.status_code == 409, r.text
        assert r.json()["error"] == (
            f"output_adapter 'run-step-0001' is taken: job 'run/step-1' made it ({adapter}); "
            "a job does not replace another job's adapter: give this job another output_adapter"
        )
        assert client.get("/v1/jobs/other/step-0001").status_code == 404
        # The same job again is the same job.
        assert client.post("/v1/jobs", json=job_body(trajs, id="run/step-1")).status_code == 200

    # A trainer that lost its job records: the job that made the adapter
    # (its marker says which) may train it again, as the orchestrator
    # resubmits a job the trainer no longer knows; any other is refused.
    shutil.rmtree(tmp_path / "jobs")
    with TestClient(make_app(tmp_path, model_dir)) as client:
        assert client.post("/v1/jobs", json=other).status_code == 409
        assert (adapter / "adapter_model.safetensors").read_bytes() == made
        with caplog.at_level("INFO", logger="grpo_trainer.train"):
            r = client.post("/v1/jobs", json=job_body(trajs, id="run/step-1"))
            assert r.status_code == 202, r.text
            assert wait(client, "run/step-1")["state"] == "succeeded"
        replaced = f"replacing adapter {adapters / 'run-step-0001'}, made by an earlier run of job "
        assert replaced + "run/step-1" in caplog.text
        # Training is deterministic: the same adapter again.
        assert (adapter / "adapter_model.safetensors").read_bytes() == made

        # A directory this trainer did not make is nobody's to replace.
        (adapters / "users").mkdir()
        r = client.post("/v1/jobs", json=job_body(trajs, id="x/1", output_adapter="users"))
        assert r.status_code == 409, r.text
        assert r.json()["error"] == (
            f"output_adapter 'users' is taken: {adapters / 'users'} exists, made by no job this "
            "trainer has a record of; a job does not replace another job's adapter: give this "
            "job another output_adapter, or remove that directory"
        )


def test_a_job_replaces_the_adapter_of_a_cancelled_or_failed_job(
    tmp_path, model_dir, trajs, caplog, monkeypatch
):
    # A job can end cancelled or failed with its adapter written: cancelled
    # while it saves (the save is not interrupted), or failing after it
    # saved. No answer of the trainer points at that adapter, and another
    # job naming it replaces it (logged); it was refused with 409 naming
    # the cancelled or failed job.
    app = make_app(tmp_path, model_dir)
    save = train_module.save_adapter

    def save_then_fail(*args, **kwargs):
        job_id = args[3]
        if job_id == "c/1":
            app.state.jobs.cancel(job_id)  # a DELETE that arrives during the save
        save(*args, **kwargs)
        if job_id == "f/1":
            raise OSError("disk gone after the save")

    monkeypatch.setattr(train_module, "save_adapter", save_then_fail)
    adapters = tmp_path / "adapters"
    first = {"cancelled": "c", "failed": "f"}
    with TestClient(app) as client:
        for name in first.values():
            r = client.post("/v1/jobs", json=job_body(trajs, id=f"{name}/1", output_adapter=name))
            assert r.status_code == 202, r.text
        # Jobs run one at a time, in order: the cancelled job's save is
        # over once the failed job has ended.
        assert wait(client, "f/1")["state"] == "failed"
        for state, name in first.items():
            assert client.get(f"/v1/jobs/{name}/1").json()["state"] == state
            marker = json.loads((adapters / name / "grpo_job.json").read_text())
            assert marker == {"job_id": f"{name}/1"}

    # A restart: the job records are read back.
    with (
        TestClient(make_app(tmp_path, model_dir)) as client,
        caplog.at_level("INFO", logger="grpo_trainer.train"),
    ):
        for state, name in first.items():
            other = job_body(trajs, id=f"other/{name}", output_adapter=name)
            r = client.post("/v1/jobs", json=other)
            assert r.status_code == 202, r.text
            job = wait(client, other["id"])
            assert job["state"] == "succeeded", job
            assert job["adapter"]["path"] == str((adapters / name).resolve())
            marker = json.loads((adapters / name / "grpo_job.json").read_text())
            assert marker == {"job_id": other["id"]}
            assert (
                f"replacing adapter {adapters / name} with job other/{name}'s: "
                f"job {name}/1 made it and ended {state}"
            ) in caplog.text


def test_a_refused_job_names_the_job_that_made_the_adapter(tmp_path):
    # When several jobs have held one adapter name (a data directory shared
    # by two trainers, or records from before the refusal), the 409 names
    # the job the adapter's grpo_job.json names, the one that made what is
    # there now; it named the first of the records read. Without that file
    # it names the latest created succeeded job, as the Go reference does.
    from grpo_trainer.api import JobRequest
    from grpo_trainer.jobs import AdapterTaken, JobManager

    def never(req, ctl):
        raise AssertionError("not started")

    jobs, adapters = tmp_path / "jobs", tmp_path / "adapters"
    # Read back in the order of their directories' names (a%2F1 first),
    # created the other way round (z/1 the latest).
    t0 = 1.7e9
    for job_id, name, created in [
        ("a/1", "x", t0),
        ("z/1", "x", t0 + 3600),
        ("a/2", "y", t0),
        ("z/2", "y", t0 + 3600),
    ]:
        job = {
            "id": job_id,
            "state": "succeeded",
            "progress": 1.0,
            "adapter": {"name": name, "path": str(adapters / name)},
        }
        d = jobs / job_dir_name(job_id)
        d.mkdir(parents=True)
        (d / JOB_FILE).write_text(json.dumps({"job": job, "created": created, "updated": created}))
    # x was made last by m/1, which this trainer has no record of; y was
    # made before adapters named their job.
    for name in ("x", "y"):
        (adapters / name).mkdir(parents=True)
        (adapters / name / "adapter_config.json").write_text("{}")
    (adapters / "x" / "grpo_job.json").write_text(json.dumps({"job_id": "m/1"}) + "\n")

    m = JobManager(jobs, never, adapters_dir=adapters)
    m.open()
    for name, owner in [("x", "m/1"), ("y", "z/2")]:
        body = {
            "id": f"n/{name}",
            "output_adapter": name,
            "trajectories": [{"messages_and_choices": [{"role": "user"}], "advantage": 1.0}],
        }
        with pytest.raises(AdapterTaken) as taken:
            m.create(JobRequest.model_validate(body), json.dumps(body).encode())
        assert str(taken.value) == (
            f"output_adapter {name!r} is taken: job {owner!r} made it ({adapters / name}); "
            "a job does not replace another job's adapter: give this job another output_adapter"
        )


def test_start_removes_adapters_left_half_saved(tmp_path, model_dir):
    # A trainer killed while saving leaves its temporary adapter directory
    # (.tmp-<name>-<hex>); the next start removes it once it is abandoned
    # (untouched for 10 minutes, so a save in progress elsewhere is spared).
    adapters = tmp_path / "adapters"
    old_tmp = adapters / ".tmp-run-step-0001-0123abcd"
    young_tmp = adapters / ".tmp-run-step-0002-4567ef01"
    for d in (old_tmp, young_tmp, adapters / "run-step-0000"):
        d.mkdir(parents=True)
        (d / "adapter_model.safetensors").write_bytes(b"partial")
    long_ago = time.time() - 3600
    os.utime(old_tmp, (long_ago, long_ago))
    with TestClient(make_app(tmp_path, model_dir)) as client:
        assert client.get("/healthz").status_code == 200
    assert sorted(p.name for p in adapters.iterdir()) == [young_tmp.name, "run-step-0000"]


def test_start_removes_only_abandoned_half_created_job_directories(tmp_path, caplog):
    # A trainer killed in a job create leaves a directory without its
    # record (job.json): only the request and temporary files. The next
    # start removes such a directory once untouched for 10 minutes (a
    # younger one may be a create in progress in another process) and
    # leaves alone anything else without a record: not the trainer's.
    from grpo_trainer.jobs import JobManager

    jobs = tmp_path / "jobs"
    dirs = {
        "cut-short": [REQUEST_FILE, f".{REQUEST_FILE}.0123abcd.tmp"],
        "cut-shorter": [f".{REQUEST_FILE}.4567ef01.tmp"],
        "young": [REQUEST_FILE],
        "users": ["notes.txt"],
        "users-with-request": [REQUEST_FILE, "model.bin"],
        "users-nested": [REQUEST_FILE, "sub/x"],
    }
    long_ago = time.time() - 3600
    for name, files in dirs.items():
        for f in files:
            (jobs / name / f).parent.mkdir(parents=True, exist_ok=True)
            (jobs / name / f).write_bytes(b"{}")
        if name != "young":
            os.utime(jobs / name, (long_ago, long_ago))

    def never(req, ctl):
        raise AssertionError("not started")

    with caplog.at_level("INFO", logger="grpo_trainer.jobs"):
        JobManager(jobs, never).open()
    assert sorted(p.name for p in jobs.iterdir()) == [
        "users",
        "users-nested",
        "users-with-request",
        "young",
    ]
    assert (jobs / "users" / "notes.txt").read_bytes() == b"{}"
    removed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("removing")]
    assert sorted(removed) == [
        f"removing {jobs / n}: a job create cut short (no job.json, untouched for over 10 minutes)"
        for n in ("cut-short", "cut-shorter")
    ]
    left = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sorted(left) == [
        f"{jobs / n} is not a trainer job directory (no job.json, and files a job create "
        "does not write); left alone"
        for n in ("users", "users-nested", "users-with-request")
    ]


def test_start_removes_abandoned_temporary_files_of_recorded_jobs(tmp_path, caplog):
    # A trainer killed while it rewrote a job's record leaves the temporary
    # file beside it (.job.json.<hex>.tmp). The next start removes it once
    # untouched for 10 minutes (a younger one may be a write in progress in
    # another process), as the Go reference does; it was left for good.
    from grpo_trainer.jobs import JobManager

    def never(req, ctl):
        raise AssertionError("not started")

    jobs = tmp_path / "jobs"
    d = jobs / job_dir_name("run/step-0001")
    d.mkdir(parents=True)
    rec = {"job": {"id": "run/step-0001", "state": "failed", "error": "x"}, "created": 1.0}
    (d / JOB_FILE).write_text(json.dumps(rec))
    old, young = d / f".{JOB_FILE}.0123abcd.tmp", d / f".{JOB_FILE}.4567ef01.tmp"
    old_other = d / "notes.tmp"  # not a temporary file of the trainer's
    for p in (old, young, old_other):
        p.write_bytes(b"{")
    long_ago = time.time() - 3600
    for p in (old, old_other):
        os.utime(p, (long_ago, long_ago))

    with caplog.at_level("INFO", logger="grpo_trainer.jobs"):
        JobManager(jobs, never).open()
    assert sorted(p.name for p in d.iterdir()) == sorted([JOB_FILE, young.name, old_other.name])
    removed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("removing")]
    assert removed == [
        f"removing {old}: a temporary file of a write cut short (untouched for over 10 minutes)"
    ]


def test_job_requests_over_the_size_limit_are_refused(tmp_path, model_dir, trajs):
    app = make_app(tmp_path, model_dir)
    body = json.dumps(job_body(trajs)).encode()
    app.state.config.max_job_bytes = len(body) - 1
    with TestClient(app) as client:
        r = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text
        assert r.json()["error"].startswith(
            f"a job request of {len(body)} bytes; this trainer accepts at most {len(body) - 1}"
        )
        assert client.get("/v1/jobs/run/step-0001").status_code == 404

        def chunks():
            yield body

        r = client.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 411, r.text
        assert "Content-Length" in r.json()["error"]
    app = make_app(tmp_path / "b", model_dir)
    app.state.config.max_job_bytes = len(body)
    with TestClient(app) as client:
        r = client.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 202, r.text

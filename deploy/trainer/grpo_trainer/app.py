"""The HTTP server: FastAPI app with the DESIGN §5 job API, /healthz and
/metrics. Everything it holds lives on the app object (app.state), built by
create_app; the lifespan opens the job records and starts the worker, and
on shutdown stops it."""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import ValidationError

from grpo_trainer import __version__
from grpo_trainer.api import ErrorBody, Job, JobRequest, Metrics
from grpo_trainer.jobs import (
    DEFAULT_MAX_QUEUED,
    QUEUE_FULL_RETRY_AFTER,
    AdapterTaken,
    JobEvents,
    JobManager,
    JobNotFound,
    QueueFull,
)
from grpo_trainer.metrics import TrainerMetrics
from grpo_trainer.models import ModelNotFound, ModelStore
from grpo_trainer.train import Control, JobError, TrainOptions, remove_abandoned_saves, run_job

log = logging.getLogger("grpo_trainer")


# The largest job request accepted by default, as the Go reference trainer:
# a body is held in memory several times over while it is decoded.
DEFAULT_MAX_JOB_BYTES = 256 << 20


@dataclass
class Config:
    data_dir: Path
    models: ModelStore = field(default_factory=ModelStore)
    train: TrainOptions = field(default_factory=TrainOptions)
    max_job_bytes: int = DEFAULT_MAX_JOB_BYTES
    max_queued: int = DEFAULT_MAX_QUEUED
    # The bearer token every request but /healthz and /metrics must carry;
    # "" asks for none (a trainer on loopback: the CLI requires one beyond).
    api_key: str = ""

    @property
    def jobs_dir(self) -> Path:
        return self.data_dir / "jobs"

    @property
    def adapters_dir(self) -> Path:
        return self.data_dir / "adapters"

    def parent_refusal(self, path: str) -> str:
        """Why a job may not start from the adapter at path, "" when it
        may: parents are read from this trainer's adapters directory and
        the served models' directories only (symlinks followed), so a job
        cannot make the trainer read any file it can. The answer is the
        same whether a refused path exists or not."""
        real = Path(os.path.realpath(path))
        models = [*self.models.paths.values(), self.models.default]
        roots = [self.adapters_dir, *(m for m in models if m is not None)]
        if any(real.is_relative_to(os.path.realpath(r)) for r in roots):
            return ""
        return (
            f"parent_adapter.path {path!r} is refused: a parent adapter is read only from "
            f"this trainer's adapters directory ({self.adapters_dir}/<name>) or a served "
            "model's directory"
        )


def field_errors(err: ValidationError | RequestValidationError) -> str:
    """One line naming each bad field, e.g. "lora.rank: Input should be
    less than or equal to 256"."""
    parts = []
    for e in err.errors():
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        name = ".".join(loc) or "body"
        parts.append(f"{name}: {e.get('msg', 'invalid')}")
    return "; ".join(parts)


def create_app(cfg: Config) -> FastAPI:
    """Builds the app; no I/O happens until its lifespan starts."""
    registry = CollectorRegistry()
    metrics = TrainerMetrics(registry)

    def runner(req: JobRequest, ctl: Control) -> tuple[Metrics, Path]:
        # Checked again here: a request recorded before a restart, or a
        # symlink changed since the create.
        if req.parent_adapter is not None and (
            refused := cfg.parent_refusal(req.parent_adapter.path)
        ):
            raise JobError(refused)
        path = cfg.models.resolve(req.base_model)
        base, tokenizer = cfg.models.get(path)
        try:
            return run_job(req, base, tokenizer, cfg.adapters_dir, cfg.train, ctl)
        except BaseException:
            # run_job restores the base model as it ends; should that have
            # failed too, the next job loads it afresh.
            if any("lora_" in name for name, _ in base.named_parameters()):
                cfg.models.forget()
            raise

    manager = JobManager(
        cfg.jobs_dir,
        runner,
        JobEvents(finished=metrics.finished, queue_length=metrics.queue_length),
        cfg.adapters_dir,
        cfg.max_queued,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        cfg.adapters_dir.mkdir(parents=True, exist_ok=True)
        remove_abandoned_saves(cfg.adapters_dir)
        manager.open()
        manager.start()
        log.info("trainer serving data_dir=%s", cfg.data_dir)
        try:
            yield
        finally:
            manager.close()

    app = FastAPI(title="grpo reference trainer", version=__version__, lifespan=lifespan)
    app.add_middleware(JobSizeLimit, limit=lambda: cfg.max_job_bytes)
    # Added last, so it runs first: nothing is answered before the key.
    app.add_middleware(BearerAuth, key=lambda: cfg.api_key)
    app.state.config = cfg
    app.state.jobs = manager
    app.state.metrics = metrics
    app.state.registry = registry

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"error": field_errors(err)})

    @app.post("/v1/jobs", status_code=202, response_model=Job, response_model_exclude_none=True)
    def create_job(req: JobRequest) -> JSONResponse:
        try:
            return _job_answer(manager.get, req.id)  # a known id: the job as it is
        except JobNotFound:
            pass
        try:
            cfg.models.resolve(req.base_model)
        except ModelNotFound as e:
            return _error(400, str(e))
        if req.parent_adapter is not None and (
            refused := cfg.parent_refusal(req.parent_adapter.path)
        ):
            log.warning("trainer job %s refused: %s", req.id, refused)
            return _error(400, refused)
        try:
            job, created = manager.create(req, req.model_dump_json().encode())
        except AdapterTaken as e:
            log.warning("trainer job %s refused: %s", req.id, e)
            return _error(409, str(e))
        except QueueFull as e:
            return JSONResponse(
                status_code=429,
                content=ErrorBody(error=str(e)).model_dump(),
                headers={"Retry-After": str(QUEUE_FULL_RETRY_AFTER)},
            )
        except OSError as e:
            log.error("create trainer job %s: %s", req.id, e)
            return _error(500, f"record job {req.id}: {e}")
        return JSONResponse(
            status_code=202 if created else 200,
            content=job.model_dump(mode="json", exclude_none=True),
            headers={"Location": "/v1/jobs/" + quote(req.id, safe="/")},
        )

    @app.get("/v1/jobs/{job_id:path}", response_model=Job, response_model_exclude_none=True)
    def get_job(job_id: str) -> JSONResponse:
        return _job_or_404(manager.get, job_id)

    @app.delete("/v1/jobs/{job_id:path}", response_model=Job, response_model_exclude_none=True)
    def cancel_job(job_id: str) -> JSONResponse:
        return _job_or_404(manager.cancel, job_id)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    def prometheus_metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _error(code: int, msg: str) -> JSONResponse:
    return JSONResponse(status_code=code, content=ErrorBody(error=msg).model_dump())


def _job_answer(f: Callable[[str], Job], job_id: str) -> JSONResponse:
    return JSONResponse(
        status_code=200, content=f(job_id).model_dump(mode="json", exclude_none=True)
    )


def _job_or_404(f: Callable[[str], Job], job_id: str) -> JSONResponse:
    try:
        return _job_answer(f, job_id)
    except JobNotFound:
        return _error(404, f"job {job_id!r} not found")


class JobSizeLimit:
    """Refuses a job create whose body is larger than limit (413) or does
    not declare its length (411), before any of it is read: a body is held
    in memory several times over while it is decoded (a 105 MB job took
    about 600 MB). grpo's clients always send a Content-Length."""

    def __init__(self, app: Callable, limit: Callable[[], int]) -> None:
        self.app = app
        self.limit = limit  # read at each request: the app's config may change it

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/v1/jobs":
            length = dict(scope["headers"]).get(b"content-length")
            if length is None or not length.isdigit():
                msg = "a job request must declare its Content-Length"
                return await refuse(send, 411, msg)
            if int(length) > (limit := self.limit()):
                msg = (
                    f"a job request of {int(length)} bytes; this trainer accepts at most "
                    f"{limit} (--max-job-bytes); trajectories grow with n, "
                    "rounds squared and episodes"
                )
                return await refuse(send, 413, msg)
        await self.app(scope, receive, send)


# Paths served without the key: probes and Prometheus read no job.
OPEN_PATHS = frozenset({"/healthz", "/metrics"})


class BearerAuth:
    """Refuses (401) a request that does not carry "Authorization: Bearer
    <key>" (what grpo's trainer.api_key_env sends), when key() is not "",
    but to OPEN_PATHS."""

    def __init__(self, app: Callable, key: Callable[[], str]) -> None:
        self.app = app
        self.key = key  # read at each request: the app's config may change it

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        key = self.key()
        if key and scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            got = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(got, b"Bearer " + key.encode()):
                msg = "this trainer needs an Authorization: Bearer <key> header with its key"
                return await refuse(send, 401, msg, [(b"www-authenticate", b"Bearer")])
        await self.app(scope, receive, send)


async def refuse(
    send: Callable, status: int, msg: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """Answers status with {"error": msg}, from an ASGI middleware."""
    body = ErrorBody(error=msg).model_dump_json().encode()
    head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})

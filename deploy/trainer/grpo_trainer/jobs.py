"""The job manager: jobs run one at a time in the order they arrived, on a
worker thread, and each has its own directory under the jobs directory so a
restarted trainer answers for finished jobs and re-runs unfinished ones
(training is deterministic for a seed, so the result is the same).

A job's request (trajectories: up to hundreds of megabytes) lives only in its
directory; memory holds small records, and the worker reads a request when
it starts the job. The queue is bounded, and a job that was running when the
trainer died is run again at most MAX_RESTARTS times."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from urllib.parse import quote

from pydantic import ValidationError

from grpo_trainer.api import TERMINAL_STATES, Adapter, Job, JobRequest, Metrics
from grpo_trainer.train import (
    ABANDONED_AFTER,
    REPLACEABLE_STATES,
    Control,
    JobError,
    adapter_job,
    adapter_taken,
)

JOB_FILE = "job.json"  # the job's state, rewritten on each transition
REQUEST_FILE = "request.json"  # the create body, written once

# Runs of a job that a dying trainer cut short, after which it is failed
# rather than run again: a job that kills the trainer (out of memory) would
# otherwise kill every restart.
MAX_RESTARTS = 3
DEFAULT_MAX_QUEUED = 64
# Seconds a client refused for a full queue is asked to wait: about a job.
QUEUE_FULL_RETRY_AFTER = 60

log = logging.getLogger("grpo_trainer.jobs")


class JobNotFound(LookupError):
    pass


class AdapterTaken(Exception):
    """A job's output_adapter is an adapter another job made or is to make."""


class QueueFull(Exception):
    """The queue holds max_queued jobs already."""


class Cancelled(Exception):
    """The job was cancelled by DELETE."""


class Interrupted(Exception):
    """The server is shutting down; the job stays unfinished on disk."""


# Runner trains one job and returns its metrics and adapter directory.
Runner = Callable[[JobRequest, Control], tuple[Metrics, Path]]


@dataclass
class _Entry:
    job: Job
    created: float
    output_adapter: str = ""  # the request's, to refuse taken names
    restarts: int = 0  # runs cut short by the trainer's death
    cancelled: bool = False
    started: float = 0.0


@dataclass
class JobEvents:
    """Callbacks the manager calls as jobs finish (metrics hook here)."""

    finished: Callable[[Job, float], None] = lambda job, seconds: None
    queue_length: Callable[[int], None] = lambda n: None


def write_atomic(path: Path, data: bytes) -> None:
    """Writes path through a fsynced temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_temporary(name: str) -> bool:
    """Whether name is one of write_atomic's temporary files."""
    return name.startswith(".") and name.endswith(".tmp")


def _half_created(d: Path) -> bool:
    """Whether d holds only what a job create writes before the job's
    record: the request and temporary files (or nothing yet)."""
    try:
        return all(
            not e.is_dir() and (e.name == REQUEST_FILE or _is_temporary(e.name))
            for e in d.iterdir()
        )
    except OSError:
        return False


def _abandoned(p: Path) -> bool:
    """Whether p was last changed over ABANDONED_AFTER ago."""
    try:
        return time.time() - p.stat().st_mtime > ABANDONED_AFTER
    except OSError:
        return False


def _remove_abandoned_temporaries(d: Path) -> None:
    """Removes d's temporary files (write_atomic's) untouched for
    ABANDONED_AFTER: a killed trainer's, as the Go reference removes them.
    A younger one may be a write in progress in another process."""
    try:
        entries = list(d.iterdir())
    except OSError:
        return
    for p in entries:
        if _is_temporary(p.name) and p.is_file() and _abandoned(p):
            log.info(
                "removing %s: a temporary file of a write cut short (untouched for over "
                "%d minutes)",
                p,
                ABANDONED_AFTER // 60,
            )
            try:
                p.unlink(missing_ok=True)
            except OSError as e:
                log.warning("remove %s: %s", p, e)


def job_dir_name(job_id: str) -> str:
    """A directory name for a job id: escaped (so "run/step-0003" and ".."
    are safe), or hashed when the escaped id would be too long. A leading
    "." is escaped too: "." and ".." would name the jobs directory or its
    parent, and open() skips dot-names (temporary files)."""
    name = quote(job_id, safe="-_")
    if name.startswith("."):
        name = "%2E" + name[1:]
    if len(name) > 200:
        # No id can name this directory: the API refuses ids of this shape
        # (api.HASHED_ID_RE).
        name = "sha256-" + sha256(job_id.encode()).hexdigest()
    return name


class JobManager:
    """Owns the job records and the worker thread. The constructor does no
    I/O; open() loads the records, start() starts the worker, close() stops
    it (a job in training is left unfinished, to run again after a
    restart)."""

    def __init__(
        self,
        jobs_dir: Path,
        runner: Runner,
        events: JobEvents | None = None,
        adapters_dir: Path | None = None,
        max_queued: int = DEFAULT_MAX_QUEUED,
    ):
        self.dir = jobs_dir
        self.max_queued = max_queued
        self.adapters_dir = adapters_dir  # where output adapters go, to refuse taken names
        self.runner = runner
        self.events = events or JobEvents()
        self._cv = threading.Condition()
        self._jobs: dict[str, _Entry] = {}
        self._queue: list[_Entry] = []
        self._stopping = False
        self._thread: threading.Thread | None = None

    # --- records

    def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        requeued = []
        with self._cv:
            for d in sorted(self.dir.iterdir()):
                if not d.is_dir() or d.name.startswith("."):
                    continue
                rec_file = d / JOB_FILE
                if not rec_file.exists():
                    # A create cut short before its record was written
                    # (the trainer was killed): removed when it holds
                    # nothing a create does not write and nobody has
                    # touched it for ABANDONED_AFTER (another process may
                    # be writing a younger one), as the Go reference does.
                    # Anything else is not this trainer's, and left alone.
                    if not _half_created(d):
                        log.warning(
                            "%s is not a trainer job directory (no %s, and files a job "
                            "create does not write); left alone",
                            d,
                            JOB_FILE,
                        )
                    elif _abandoned(d):
                        log.info(
                            "removing %s: a job create cut short (no %s, untouched for "
                            "over %d minutes)",
                            d,
                            JOB_FILE,
                            ABANDONED_AFTER // 60,
                        )
                        shutil.rmtree(d, ignore_errors=True)
                    continue
                _remove_abandoned_temporaries(d)
                try:
                    rec = json.loads(rec_file.read_bytes())
                    job = Job.model_validate(rec["job"])
                    created = float(rec["created"])
                except (OSError, ValueError, KeyError, TypeError, ValidationError) as e:
                    raise RuntimeError(f"read job record {rec_file}: {e}") from e
                e = _Entry(
                    job=job,
                    created=created,
                    output_adapter=str(rec.get("output_adapter", "")),
                    restarts=int(rec.get("restarts", 0)),
                )
                self._jobs[job.id] = e
                if job.state in TERMINAL_STATES:
                    continue
                if not e.output_adapter:  # a record written before it kept the name
                    try:
                        req = JobRequest.model_validate_json((d / REQUEST_FILE).read_bytes())
                    except (OSError, ValueError) as err:
                        e.job.state = "failed"
                        e.job.error = f"job request record unreadable after restart: {err}"
                        self._persist(e)
                        continue
                    e.output_adapter = req.output_adapter
                    del req
                if job.state == "running":  # the trainer died while it ran
                    e.restarts += 1
                    if e.restarts > MAX_RESTARTS:
                        e.job.state = "failed"
                        e.job.error = (
                            f"the trainer stopped {e.restarts} times while this job ran "
                            f"(killed: out of memory?); not run again after {MAX_RESTARTS} "
                            "restarts"
                        )
                        self._persist(e)
                        log.warning("trainer job %s failed: %s", job.id, e.job.error)
                        continue
                e.job.state, e.job.progress = "queued", 0.0
                self._persist(e)
                requeued.append(e)
            requeued.sort(key=lambda e: e.created)
            self._queue.extend(requeued)
            self.events.queue_length(len(self._queue))
        if requeued:
            log.info("re-running %d unfinished trainer jobs", len(requeued))

    def _persist(self, e: _Entry) -> None:
        rec = {
            "job": e.job.model_dump(mode="json"),
            "created": e.created,
            "updated": time.time(),
            "output_adapter": e.output_adapter,
            "restarts": e.restarts,
        }
        d = self.dir / job_dir_name(e.job.id)
        write_atomic(d / JOB_FILE, json.dumps(rec).encode())

    # --- API

    def create(self, req: JobRequest, body: bytes) -> tuple[Job, bool]:
        """Records and queues a job. A known id returns the existing job and
        False: the same id never trains twice. A job whose output_adapter
        another job made or is to make raises AdapterTaken; a new job when
        max_queued wait already, QueueFull. body is written to the job's
        directory and not kept."""
        with self._cv:
            if req.id in self._jobs:
                return self._jobs[req.id].job.model_copy(deep=True), False
            if len(self._queue) >= self.max_queued:
                raise QueueFull(
                    f"the trainer's queue is full: {len(self._queue)} jobs wait "
                    f"(--max-queued {self.max_queued}); post again later"
                )
            taken = self._adapter_taken(req)
            if taken:
                raise AdapterTaken(taken)
            e = _Entry(
                job=Job(id=req.id, state="queued"),
                created=time.time(),
                output_adapter=req.output_adapter,
            )
            d = self.dir / job_dir_name(req.id)
            try:
                d.mkdir(parents=True, exist_ok=True)
                write_atomic(d / REQUEST_FILE, body)
                self._persist(e)
            except OSError:
                shutil.rmtree(d, ignore_errors=True)
                raise
            self._jobs[req.id] = e
            self._queue.append(e)
            self.events.queue_length(len(self._queue))
            self._cv.notify_all()
            answer = e.job.model_copy(deep=True)  # before the worker can start it
        log.info(
            "trainer job queued id=%s output_adapter=%s trajectories=%d",
            req.id,
            req.output_adapter,
            len(req.trajectories),
        )
        return answer, True

    def _adapter_taken(self, req: JobRequest) -> str:
        """Why req may not have its output_adapter, or "": a queued or
        running job is to make it (of several, the latest created is
        named), or another job made it. The job named as its maker is the
        one the adapter's ADAPTER_JOB_FILE names, which made what is there
        now (the records may name others that held the name before);
        without that file (a directory written before the file existed, or
        no directory), the latest created succeeded job whose adapter has
        the name; failing that, an existing directory is no known job's.
        The adapter of a job that ended cancelled or failed is free
        (REPLACEABLE_STATES). As the Go reference trainer decides. Callers
        hold self._cv."""
        name = req.output_adapter
        jobs = self._jobs.values()
        to_make = max(
            (e for e in jobs if e.job.state in ("queued", "running") and e.output_adapter == name),
            key=lambda e: e.created,
            default=None,
        )
        made = max(
            (
                e
                for e in jobs
                if e.job.state == "succeeded" and e.job.adapter and e.job.adapter.name == name
            ),
            key=lambda e: e.created,
            default=None,
        )
        if to_make is not None:
            return adapter_taken(name, to_make.job.id, None, to_make.job.state)
        dest = self.adapters_dir / name if self.adapters_dir is not None else None
        owner = adapter_job(dest) if dest is not None else None
        if owner:
            if owner == req.id or self._state(owner) in REPLACEABLE_STATES:
                return ""
            return adapter_taken(name, owner, dest)
        if made is not None and made.job.adapter is not None:
            return adapter_taken(name, made.job.id, Path(made.job.adapter.path))
        if owner == "":
            return adapter_taken(name, "", dest)
        return ""

    def _state(self, job_id: str) -> str:
        """Job job_id's state, "" for an unknown job. Callers hold self._cv."""
        e = self._jobs.get(job_id)
        return e.job.state if e is not None else ""

    def get(self, job_id: str) -> Job:
        with self._cv:
            e = self._jobs.get(job_id)
            if e is None:
                raise JobNotFound(job_id)
            return e.job.model_copy(deep=True)

    def cancel(self, job_id: str) -> Job:
        """Cancels a queued or running job; a finished one is left as it is."""
        with self._cv:
            e = self._jobs.get(job_id)
            if e is None:
                raise JobNotFound(job_id)
            if e.job.state not in TERMINAL_STATES:
                e.cancelled = True
                e.job.state = "cancelled"
                self._persist(e)
                if e in self._queue:
                    self._queue.remove(e)
                    self.events.queue_length(len(self._queue))
                    self.events.finished(e.job, 0.0)
                log.info("trainer job cancelled id=%s", job_id)
            return e.job.model_copy(deep=True)

    # --- worker

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="trainer-jobs", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 60.0) -> None:
        """Stops the worker; safe to call twice."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _next(self) -> _Entry | None:
        with self._cv:
            while not self._stopping and not self._queue:
                self._cv.wait()
            if self._stopping:
                return None
            e = self._queue.pop(0)
            self.events.queue_length(len(self._queue))
            e.job.state, e.job.progress = "running", 0.0
            e.started = time.monotonic()
            self._persist(e)
            return e

    def _run(self) -> None:
        while True:
            e = self._next()
            if e is None:
                return
            self._execute(e)

    def _execute(self, e: _Entry) -> None:
        ctl = _EntryControl(self, e)
        result: tuple[Metrics, Path] | None = None
        error: str | None = None
        try:
            req = self._request(e)
            result = self.runner(req, ctl)
        except (Cancelled, Interrupted):
            pass
        except Exception as err:  # any failure of one job fails that job, not the server
            error = str(err) or type(err).__name__
            if not isinstance(err, (ValueError, JobError)):
                log.exception("trainer job %s failed", e.job.id)
        with self._cv:
            seconds = time.monotonic() - e.started
            if e.cancelled:
                self.events.finished(e.job, seconds)
                return
            if self._stopping and result is None and error is None:
                # Stopped on purpose, not by a death: queued again, not a
                # restart.
                log.info("trainer job interrupted by shutdown id=%s", e.job.id)
                e.job.state, e.job.progress = "queued", 0.0
                self._persist(e)
                return
            if error is not None:
                e.job.state, e.job.error = "failed", error
            elif result is not None:
                metrics, path = result
                e.job.state, e.job.progress = "succeeded", 1.0
                e.job.metrics = metrics
                e.job.adapter = Adapter(name=e.output_adapter, path=str(path))
            self._persist(e)
            self.events.finished(e.job, seconds)
        log.info(
            "trainer job finished id=%s state=%s seconds=%.2f error=%s",
            e.job.id,
            e.job.state,
            seconds,
            e.job.error,
        )

    def _request(self, e: _Entry) -> JobRequest:
        """The job's request, read from its directory."""
        file = self.dir / job_dir_name(e.job.id) / REQUEST_FILE
        try:
            return JobRequest.model_validate_json(file.read_bytes())
        except (OSError, ValueError) as err:
            raise JobError(f"job request record unreadable: {err}") from err


@dataclass
class _EntryControl(Control):
    manager: JobManager
    entry: _Entry
    _last: float = field(default=0.0)

    def check(self) -> None:
        if self.entry.cancelled:
            raise Cancelled()
        if self.manager._stopping:
            raise Interrupted()

    def progress(self, fraction: float) -> None:
        with self.manager._cv:
            if not self.entry.cancelled:
                self.entry.job.progress = min(1.0, max(0.0, fraction))

    def job_state(self, job_id: str) -> str:
        with self.manager._cv:
            return self.manager._state(job_id)

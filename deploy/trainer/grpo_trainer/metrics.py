"""Prometheus metrics of the trainer, on a registry the app owns."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from grpo_trainer.api import Job


class TrainerMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.jobs = Counter(
            "grpo_trainer_jobs_total",
            "Trainer jobs that ended, by final state.",
            ["state"],
            registry=registry,
        )
        self.job_seconds = Histogram(
            "grpo_trainer_job_duration_seconds",
            "Wall time of trainer jobs from start to end, by final state.",
            ["state"],
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
            registry=registry,
        )
        self.tokens = Counter(
            "grpo_trainer_tokens_trained_total",
            "Completion tokens that carried loss, counted once per epoch.",
            registry=registry,
        )
        self.loss = Gauge("grpo_trainer_loss", "Loss of the last succeeded job.", registry=registry)
        self.kl = Gauge(
            "grpo_trainer_kl", "KL to the base of the last succeeded job.", registry=registry
        )
        self.grad_norm = Gauge(
            "grpo_trainer_grad_norm",
            "Gradient norm (before clipping) of the last succeeded job.",
            registry=registry,
        )
        self.clip_fraction = Gauge(
            "grpo_trainer_clip_fraction",
            "Fraction of clipped tokens in the last succeeded job.",
            registry=registry,
        )
        self.queued = Gauge("grpo_trainer_queued_jobs", "Jobs waiting to run.", registry=registry)
        for state in ("succeeded", "failed", "cancelled"):
            self.jobs.labels(state)
            self.job_seconds.labels(state)

    def finished(self, job: Job, seconds: float) -> None:
        self.jobs.labels(job.state).inc()
        self.job_seconds.labels(job.state).observe(seconds)
        if job.state == "succeeded" and job.metrics is not None:
            m = job.metrics
            self.tokens.inc(m.tokens * max(1, m.epochs))
            self.loss.set(m.loss)
            self.kl.set(m.kl)
            self.grad_norm.set(m.grad_norm)
            self.clip_fraction.set(m.clip_fraction)

    def queue_length(self, n: int) -> None:
        self.queued.set(n)

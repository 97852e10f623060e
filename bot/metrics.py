"""Prometheus metrics, one registry per app so tests and the demo never share counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.deliveries = Counter(
            "cockpit_deliveries_total",
            "Webhook deliveries by event and outcome",
            ["event", "outcome"],
            registry=r,
        )
        self.jobs = Gauge("cockpit_jobs", "Jobs by state", ["state"], registry=r)
        self.job_duration = Histogram(
            "cockpit_job_duration_seconds",
            "Job run time by kind and outcome",
            ["kind", "outcome"],
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
        )
        self.model_tokens = Counter(
            "cockpit_model_tokens_total",
            "Model tokens by provider, model and kind",
            ["provider", "model", "kind"],
            registry=r,
        )
        self.model_cost = Counter(
            "cockpit_model_cost_usd_total",
            "Model cost in USD (known rates only)",
            ["provider", "model"],
            registry=r,
        )
        self.github_calls = Counter(
            "cockpit_github_api_calls_total",
            "GitHub API calls by method and status",
            ["method", "status"],
            registry=r,
        )
        self.github_rate_limit_remaining = Gauge(
            "cockpit_github_rate_limit_remaining",
            "Last x-ratelimit-remaining seen",
            registry=r,
        )

    def set_job_counts(self, counts: dict[str, int]) -> None:
        for state in ("queued", "waiting", "running", "done", "failed", "cancelled"):
            self.jobs.labels(state=state).set(counts.get(state, 0))

    def render(self) -> bytes:
        return generate_latest(self.registry)

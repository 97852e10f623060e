"""Prometheus metrics, one registry per app so tests and the demo never share counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from bot.records.types import Job
from bot.records.vocab import JobState

# `cockpit stats`' figures (bot.stats.gauges) as gauges by provider and model, read from the
# database at each scrape: figure → (metric name, help).
REVIEW_GAUGES = {
    "reviews": ("cockpit_reviews", "Reviews that made a draft"),
    "findings_per_review": ("cockpit_review_findings_per_review", "Findings per review"),
    "published": ("cockpit_review_findings_published", "Findings published"),
    "dropped_by_people": ("cockpit_review_findings_dropped_by_people", "Findings people dropped"),
    "acceptance": (
        "cockpit_review_acceptance",
        "Published / (published + dropped by a person): people's verdicts only",
    ),
    "refuted": ("cockpit_review_findings_refuted", "Findings the verify pass refuted"),
    "withdrawn": ("cockpit_review_findings_withdrawn", "Findings withdrawn in revisions"),
    "suppressed": (
        "cockpit_review_repeats_suppressed",
        "Repeats of findings people dropped, left out",
    ),
    "fixed_after_publishing": (
        "cockpit_review_findings_fixed_after_publishing",
        "Published findings a later push fixed",
    ),
    "usd": ("cockpit_review_cost_usd", "USD of the reviews' model runs (known rates only)"),
    "usd_per_accepted": (
        "cockpit_review_usd_per_accepted_finding",
        "USD per published finding",
    ),
}


class Metrics:
    def __init__(self, recount: int = 0) -> None:
        self.recount = recount  # review changes the next scrape counts (`server.next_recount`)
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

        self.review_figures = {
            figure: Gauge(name, text, ["provider", "model"], registry=r)
            for figure, (name, text) in REVIEW_GAUGES.items()
        }

    def set_review_figures(self, figures: dict[tuple[str, str], dict[str, float]]) -> None:
        """Replace the review gauges with `figures` ((provider, model) → figure → value; a
        figure left out is not shown for that model)."""
        for gauge in self.review_figures.values():
            gauge.clear()
        for (provider, model), values in figures.items():
            for figure, value in values.items():
                self.review_figures[figure].labels(provider=provider, model=model).set(value)

    def job_finished(self, job: Job, outcome: str, seconds: float) -> None:
        self.job_duration.labels(kind=job.kind, outcome=outcome).observe(seconds)

    def set_job_counts(self, counts: dict[str, int]) -> None:
        for state in JobState:
            self.jobs.labels(state=state).set(counts.get(state, 0))

    def render(self) -> bytes:
        return generate_latest(self.registry)

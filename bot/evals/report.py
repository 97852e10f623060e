"""Eval results for machines (`--json`) and people (a markdown report with an F1/cost chart)."""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.evals.messages import Resume
from bot.evals.runner import ALL, VERIFIED, CaseResult, EvalResult, ModelRun, add_usd, variant_spend
from bot.records.vocab import VerifyStatus
from bot.texts import OPERATOR, render, say

log = logging.getLogger(__name__)

CHART_EXTRA = "pip install 'pr-cockpit[eval]'"


def _case_entry(case: CaseResult, variant: str, verify: bool) -> dict[str, Any]:
    counts = case.counts.get(variant)
    entry: dict[str, Any] = {"id": case.case.id, "labels": len(case.case.labels)}
    if counts is None:
        entry.update(tp=0, fp=0, fn=len(case.case.labels), findings=0)
    else:
        entry.update(
            tp=counts.tp,
            fp=counts.fp,
            fn=counts.fn,
            findings=counts.findings,
            strict=counts.strict,
            benchmark={
                **counts.benchmark,
                "matched_findings": counts.matched_findings,
                "labels_hit": counts.labels_hit,
            },
            known_fp=counts.known_fp,
        )
    tokens, usd, seconds = variant_spend([case], verify)
    entry.update(
        tokens=tokens,
        usd=usd,
        wall_seconds=round(seconds, 3),
        head_sha=case.head_sha,
        error=case.error,
        notes=list(case.notes),
    )
    if verify:
        entry["refuted"] = sum(1 for f in case.findings if f.verify_status == VerifyStatus.REFUTED)
        entry["verify_error"] = case.verify_error
    return entry


def run_entries(result: EvalResult, run: ModelRun) -> list[dict[str, Any]]:
    """One entry per model without the verify pass, and one with it when it ran."""
    entries = []
    for variant in (ALL, VERIFIED) if run.verify else (ALL,):
        verify = variant == VERIFIED
        total = run.total(variant)  # scores leave failed cases out; spend counts them
        tokens, usd, seconds = variant_spend(run.cases, verify)
        entries.append(
            {
                "provider": run.provider,
                "model": run.model,
                "verify": verify,
                "verify_provider": run.verify_provider if verify else None,
                "judge": result.judge,
                "judge_model": result.judge_model,
                "strict": total.strict,
                "benchmark": total.benchmark,
                "tokens": tokens,
                "usd": usd,
                "usd_per_tp": usd / total.tp if usd is not None and total.tp else None,
                "wall_seconds": round(seconds, 3),
                "elapsed_seconds": round(run.wall_seconds, 3),
                "eval_run": run.id,
                "batch": result.batch,
                "failed_cases": len(run.failed),
                "cases": [_case_entry(c, variant, verify) for c in run.cases],
            }
        )
    return entries


def results_json(result: EvalResult) -> dict[str, Any]:
    return {
        "batch": result.batch,
        "golden": [str(g.path) for g in result.goldens],
        "judge": {
            "name": result.judge,
            "model": result.judge_model,
            "tokens": result.judge_tokens,
            "usd": result.judge_usd,
            "unreadable": result.judge_unreadable,
        },
        "source_changed": result.source_changed,
        "runs": [entry for run in result.runs for entry in run_entries(result, run)],
    }


def write_json(result: EvalResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results_json(result), indent=2) + "\n", encoding="utf-8")


@dataclass(frozen=True)
class Chart:
    path: Path | None
    missing: str | None = None  # why there is no chart


@dataclass(frozen=True)
class Point:
    name: str
    x: float
    y: float  # F1 in percent


@dataclass(frozen=True)
class ChartSpec:
    """What the F1/cost chart shows, on the tables' scale (percent), as plain data."""

    title: str
    x_label: str
    y_label: str
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    usd: bool  # x is USD (else tokens)
    points: tuple[Point, ...]


def chart_spec(entries: list[dict[str, Any]], batch: int | str) -> ChartSpec:
    """F1 (strict, %) against cost: USD when every model's cost is known, else tokens. The x
    axis starts at 0 (no cost is negative; a sliver of room is left of it) and leaves room past
    the dearest run; when every run cost nothing it still spans a readable range."""
    usd = all(e["usd"] is not None for e in entries)
    points = []
    for e in entries:
        x = float(e["usd"] if usd else e["tokens"])
        y = round(100 * (e["strict"]["f1"] or 0.0), 1)
        points.append(
            Point(_plain(say(OPERATOR, "eval.chart_point", entry=e, usd=usd, x=x, y=y)), x, y)
        )
    top = max((p.x for p in points), default=0.0)
    high = top * 1.15 if top > 0 else (0.01 if usd else 1000.0)
    x_range = (-0.03 * high, high)  # a little room left of 0, so a free run is not cut in half
    free = usd and top == 0
    return ChartSpec(
        title=say(OPERATOR, "eval.chart_title", batch=batch),
        x_label=say(OPERATOR, "eval.chart_x", usd=usd, free=free),
        y_label=say(OPERATOR, "eval.chart_y"),
        x_range=x_range,
        y_range=(0.0, 100.0),
        usd=usd,
        points=tuple(points),
    )


MARKERS = "osD^vP*Xph"


def draw_chart(spec: ChartSpec, path: Path) -> Chart:
    """The chart as a PNG: each point its own marker, named in the legend below the axes
    (names never overlap, even when the points do)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        return Chart(None, say(OPERATOR, "eval.no_matplotlib"))
    fig, ax = plt.subplots(figsize=(7.2, 4.2 + 0.25 * len(spec.points)), dpi=100)
    for n, point in enumerate(spec.points):
        ax.scatter([point.x], [point.y], marker=MARKERS[n % len(MARKERS)], s=70, zorder=3,
                   label=point.name, alpha=0.85)  # fmt: skip
    ax.set_title(spec.title)
    ax.set_xlabel(spec.x_label)
    ax.set_ylabel(spec.y_label)
    ax.set_xlim(*spec.x_range)
    ax.set_ylim(*spec.y_range)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}%"))
    shown = "${:.4g}" if spec.usd else "{:,.0f}"
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: shown.format(v) if v >= 0 else ""))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Chart(path)


def _plain(text: str) -> str:
    """A chart label from user text: printable ASCII, and `$` not read as mathtext."""
    ascii_only = "".join(c if c.isascii() and c.isprintable() else "?" for c in text)[:60]
    return ascii_only.replace("$", r"\$")


def reserve_report(directory: Path, batch: int, now: dt.datetime) -> Path:
    """A report name no earlier report has: `eval-<UTC time>-run<batch>.md` (a new data
    folder starts its run numbers at 1 again), `-2`, `-3`… within one second. The file is
    created here, exclusively, so two runs never write to one name."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"eval-{now.strftime('%Y%m%d-%H%M%S')}-run{batch}"
    path, n = directory / f"{stem}.md", 1
    while True:
        try:
            path.open("x").close()
            return path
        except FileExistsError:
            n += 1
            path = directory / f"{stem}-{n}.md"


def write_report(result: EvalResult, directory: Path, *, resume: Resume) -> tuple[Path, Chart]:
    """The markdown report (see `reserve_report` for its name) and its chart beside it,
    `<name>-f1-cost.png`; `resume` says how to run it again (the report outlives a temporary
    data directory). Nothing already there is overwritten."""
    now = dt.datetime.now(dt.UTC)
    path = reserve_report(directory, result.batch, now)
    entries = [entry for run in result.runs for entry in run_entries(result, run)]
    chart = draw_chart(
        chart_spec(entries, result.batch), path.with_name(f"{path.stem}-f1-cost.png")
    )
    markdown = render(
        "eval/report.md.j2",
        result=result,
        entries=entries,
        lifts=[_lift(result, run) for run in result.runs if run.verify],
        models=[_model_view(run) for run in result.runs],
        chart=chart.path.name if chart.path else None,
        chart_missing=chart.missing,
        chart_extra=CHART_EXTRA,
        resume=resume,
        when=now.strftime("%Y-%m-%d %H:%M UTC"),
        pct=pct,
        num=num,
        usd_text=usd_text,
    )
    path.write_text(markdown, encoding="utf-8")
    return path, chart


def _lift(result: EvalResult, run: ModelRun) -> dict[str, Any]:
    without, with_verify = run_entries(result, run)
    done = [c for c in run.cases if not c.error]
    extra_usd = None
    if with_verify["usd"] is not None and without["usd"] is not None:
        extra_usd = with_verify["usd"] - without["usd"]
    return {
        "model": run.model,
        "verifier": run.verify_provider,
        "without": without,
        "with": with_verify,
        "refuted": sum(
            1 for c in done for f in c.findings if f.verify_status == VerifyStatus.REFUTED
        ),
        "lost": sum(max(c.counts[ALL].tp - c.counts[VERIFIED].tp, 0) for c in done),
        "extra_tokens": with_verify["tokens"] - without["tokens"],
        "extra_usd": extra_usd,
        "verify_failed": sum(1 for c in done if c.verify_error),
    }


def _where(path: str | None, line: int | None) -> str:
    return (path or "—") + (f":{line}" if line else "")


def _model_view(run: ModelRun) -> dict[str, Any]:
    variant = VERIFIED if run.verify else ALL
    cases = []
    for case in run.cases:
        labels = case.case.labels
        counts = None if case.error else case.counts.get(variant)
        rows = [
            {
                "finding": f,
                "where": _where(f.path, f.line),
                "label": labels[case.pairs[n]] if n in case.pairs else None,
            }
            for n, f in enumerate(case.findings)
        ]
        matched = set(case.pairs.values())
        cases.append(
            {
                "result": case,
                "counts": counts,
                "refuted": sum(1 for f in case.findings if f.verify_status == VerifyStatus.REFUTED),
                "tokens": case.review_tokens + case.verify_tokens,
                "usd": add_usd(case.review_usd, case.verify_usd),
                "rows": rows,
                "missed": [
                    {"label": label, "where": _where(label.path, label.line)}
                    for j, label in enumerate(labels)
                    if j not in matched
                ],
            }
        )
    return {"run": run, "cases": cases}


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}"


def num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def usd_text(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"

"""Eval results for machines (`--json`) and people (a markdown report with an F1/cost chart)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from bot.evals.progress import Resume
from bot.evals.results import EvalResult, RunFigures
from bot.texts import OPERATOR, render, say

CHART_EXTRA = "pip install 'pr-cockpit[eval]'"


def results_json(result: EvalResult) -> dict[str, Any]:
    return msgspec.to_builtins(result.figures)


def write_json(result: EvalResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.format(msgspec.json.encode(result.figures), indent=2) + b"\n")


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
    title: str
    x_label: str
    y_label: str
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    usd: bool  # x is USD (else tokens)
    points: tuple[Point, ...]


def chart_spec(entries: list[dict[str, Any]], batch: int | str) -> ChartSpec:
    """F1 (strict, %) against cost: USD when every model's cost is known, else tokens."""
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
    """Each point its own marker, named in the legend below the axes (names never overlap)."""
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
    """Printable ASCII, and `$` not read as mathtext."""
    ascii_only = "".join(c if c.isascii() and c.isprintable() else "?" for c in text)[:60]
    return ascii_only.replace("$", r"\$")


def reserve_report(directory: Path, batch: int, now: dt.datetime) -> Path:
    """`eval-<UTC time>-run<batch>.md`, then `-2`, `-3`… (a new data folder starts its run
    numbers at 1 again); created exclusively, so two runs never write to one name."""
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
    """The markdown report and its chart beside it; nothing already there is overwritten."""
    now = dt.datetime.now(dt.UTC)
    path = reserve_report(directory, result.batch, now)
    figures = result.figures
    spec = chart_spec(msgspec.to_builtins(figures.runs), result.batch)
    chart = draw_chart(spec, path.with_name(f"{path.stem}-f1-cost.png"))
    by_run: dict[int, list[RunFigures]] = {}
    for entry in figures.runs:
        by_run.setdefault(entry.eval_run, []).append(entry)
    markdown = render(
        "eval/report.md.j2",
        result=result,
        entries=figures.runs,
        lifts=[_lift(*by_run[run.id]) for run in result.runs if run.verify],
        models=[(run, by_run[run.id][-1]) for run in result.runs],  # with verify when it ran
        chart=chart,
        chart_extra=CHART_EXTRA,
        resume=resume,
        when=now.strftime("%Y-%m-%d %H:%M UTC"),
    )
    path.write_text(markdown, encoding="utf-8")
    return path, chart


def _lift(without: RunFigures, verified: RunFigures) -> dict[str, Any]:
    done = [(a, b) for a, b in zip(without.cases, verified.cases, strict=True) if not b.error]
    extra_usd = None if None in (verified.usd, without.usd) else verified.usd - without.usd
    return {
        "without": without,
        "with": verified,
        "refuted": sum(b.refuted or 0 for _, b in done),
        "lost": sum(max(a.tp - b.tp, 0) for a, b in done),
        "extra_tokens": verified.tokens - without.tokens,
        "extra_usd": extra_usd,
        "verify_failed": sum(1 for _, b in done if b.verify_error),
    }

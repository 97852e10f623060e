"""Charts drawn on the server as inline SVG (no script, no chart library in the browser):
a line per series over weekly points, its own axis from 0 to the largest value. Every text in
the picture is escaped; colours are presentation attributes (the CSP allows no inline style)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from markupsafe import Markup, escape

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 40
COLOURS = ("#1f6feb", "#d1242f", "#8250df", "#1a7f37")


def line_chart(
    title: str,
    labels: Sequence[str],
    series: dict[str, Sequence[float | None]],
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
) -> Markup:
    """`labels` along the x axis, each series a line (None: no point that week). An empty
    chart says so."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    values = [v for points in series.values() for v in points if v is not None]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img"'
        f' aria-label="{escape(title)}" class="chart">',
        f"<title>{escape(title)}</title>",
    ]
    if not values or not labels:
        parts.append(
            f'<text x="{WIDTH // 2}" y="{HEIGHT // 2}" text-anchor="middle" fill="#57606a">'
            "no data yet</text></svg>"
        )
        return Markup("".join(parts))  # noqa: S704 - every text in it is escaped above
    top = max(values) or 1.0
    n = len(labels)

    def x(i: int) -> float:
        return LEFT + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)

    def y(v: float) -> float:
        return TOP + plot_h - plot_h * v / top

    parts.append(
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}"'
        ' stroke="#8c959f"/>'
    )
    for tick in (0.0, top / 2, top):
        parts.append(
            f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" font-size="11"'
            f' fill="#57606a">{escape(fmt(tick))}</text>'
            f'<line x1="{LEFT}" y1="{y(tick):.1f}" x2="{LEFT + plot_w}" y2="{y(tick):.1f}"'
            ' stroke="#d0d7de" stroke-dasharray="2 4"/>'
        )
    step = max(1, n // 8)
    for i in range(0, n, step):
        parts.append(
            f'<text x="{x(i):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle" font-size="11"'
            f' fill="#57606a">{escape(labels[i])}</text>'
        )
    for k, (name, points) in enumerate(series.items()):
        colour = COLOURS[k % len(COLOURS)]
        path = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(points) if v is not None)
        if path:
            parts.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        for i, v in enumerate(points):
            if v is not None:
                parts.append(
                    f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}">'
                    f"<title>{escape(name)} {escape(labels[i])}: {escape(fmt(v))}</title></circle>"
                )
        parts.append(
            f'<text x="{LEFT + 8 + 150 * k}" y="{HEIGHT - 6}" font-size="12" fill="{colour}">'
            f"{escape(name)}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every text in it is escaped above

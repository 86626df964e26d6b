"""Draws the benchmark charts as plain SVG text: horizontal bar panels (median bar, min-max
whisker, value label) and a line chart of a per-second timeline."""

from html import escape

FONT = "font-family=\"-apple-system, 'Segoe UI', Helvetica, Arial, sans-serif\""
HIGHLIGHT = "#0f766e"  # holdfast
BAR = "#94a3b8"  # everyone else
INK = "#1e293b"
GRID = "#e2e8f0"
LINE_COLORS = ["#64748b", "#dc2626", "#ea580c", "#2563eb", "#7c3aed", "#0f766e", "#ca8a04"]



def _open(width, height, title, subtitle):
    """The start of an SVG document: the canvas, a white background, title and subtitle."""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {FONT} font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="12" y="22" font-size="15" font-weight="600" fill="{INK}">{escape(title)}</text>',
    ]
    if subtitle:
        out.append(f'<text x="12" y="40" fill="#475569">{escape(subtitle)}</text>')
    return out

def _fmt(value):
    if value is None:
        return "n/a"
    if value >= 100_000:
        return f"{value / 1000:,.0f}k"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def bars(title, panels, *, subtitle=None):
    """An SVG with one horizontal bar panel per entry of `panels`.

    Each panel is (heading, rows) and each row (label, median, low, high, highlighted);
    rows with a None median are drawn as "n/a".
    """
    label_w, panel_w, gap, row_h, top = 120, 300, 40, 24, 64
    rows_n = max((len(rows) for _, rows in panels), default=1)
    width = label_w + len(panels) * (panel_w + gap) + 20
    height = top + rows_n * row_h + 30
    out = _open(width, height, title, subtitle)
    for p, (heading, rows) in enumerate(panels):
        x0 = label_w + p * (panel_w + gap)
        values = [v for _, med, lo, hi, _ in rows for v in (med, hi) if v is not None]
        scale_max = max(values) * 1.05 if values and max(values) > 0 else 1.0
        out.append(f'<text x="{x0}" y="{top - 8}" font-weight="600" fill="{INK}">'
                   f'{escape(heading)}</text>')
        out.append(f'<line x1="{x0}" y1="{top}" x2="{x0}" y2="{top + rows_n * row_h}" '
                   f'stroke="{GRID}"/>')
        bar_w = panel_w - 70
        for i, (label, med, lo, hi, highlighted) in enumerate(rows):
            y = top + i * row_h
            if p == 0:
                weight = ' font-weight="600"' if highlighted else ""
                out.append(f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end" '
                           f'fill="{INK}"{weight}>{escape(label)}</text>')
            if med is None:
                out.append(f'<text x="{x0 + 4}" y="{y + 16}" fill="#94a3b8">n/a</text>')
                continue
            w = bar_w * max(med, 0) / scale_max  # a negative value (an RSS drop) as 0
            color = HIGHLIGHT if highlighted else BAR
            out.append(f'<rect x="{x0}" y="{y + 5}" width="{w:.1f}" height="{row_h - 10}" '
                       f'fill="{color}"/>')
            if lo is not None and hi is not None and hi > lo:
                xl, xh = (x0 + bar_w * max(v, 0) / scale_max for v in (lo, hi))
                ym = y + row_h / 2
                out.append(f'<path d="M{xl:.1f} {ym - 4}v8M{xl:.1f} {ym}H{xh:.1f}M{xh:.1f} '
                           f'{ym - 4}v8" stroke="{INK}" fill="none"/>')
            label_x = x0 + max(w, bar_w * max(hi or med, 0) / scale_max) + 6
            out.append(f'<text x="{label_x:.1f}" y="{y + 16}" fill="{INK}">{_fmt(med)}</text>')
    out.append(f'<text x="12" y="{height - 8}" fill="#64748b" font-size="11">'
               'bar: median of runs; whisker: min-max</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def lines(title, panels, *, subtitle=None, x_label="seconds"):
    """An SVG with one line-chart panel per entry of `panels`.

    Each panel is (heading, series) and each series (label, [(x, y), ...]).
    """
    panel_w, panel_h, left, top, gap = 420, 220, 56, 72, 70
    legend_h = 22 * ((len(panels[0][1]) + 2) // 3) if panels else 0
    width = left + len(panels) * (panel_w + gap)
    height = top + panel_h + 40 + legend_h
    out = _open(width, height, title, subtitle)
    for p, (heading, series) in enumerate(panels):
        x0 = left + p * (panel_w + gap)
        xs = [x for _, pts in series for x, _ in pts] or [1]
        ys = [y for _, pts in series for _, y in pts] or [1]
        x_max = max(max(xs), 1)
        y_max = max(max(ys), 1) * 1.1
        out.append(f'<text x="{x0}" y="{top - 10}" font-weight="600" fill="{INK}">'
                   f'{escape(heading)}</text>')
        for k in range(5):
            y = top + panel_h - panel_h * k / 4
            out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + panel_w}" y2="{y:.1f}" '
                       f'stroke="{GRID}"/>')
            out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#475569" '
                       f'font-size="11">{y_max * k / 4:,.0f}</text>')
        for k in range(0, int(x_max) + 1, max(1, int(x_max) // 6)):
            x = x0 + panel_w * k / x_max
            out.append(f'<text x="{x:.1f}" y="{top + panel_h + 16}" text-anchor="middle" '
                       f'fill="#475569" font-size="11">{k}</text>')
        out.append(f'<text x="{x0 + panel_w / 2}" y="{top + panel_h + 32}" text-anchor="middle" '
                   f'fill="#475569" font-size="11">{escape(x_label)}</text>')
        for i, (label, pts) in enumerate(series):
            color = HIGHLIGHT if label == "holdfast" else LINE_COLORS[i % len(LINE_COLORS)]
            path = " ".join(
                f"{x0 + panel_w * x / x_max:.1f},{top + panel_h - panel_h * y / y_max:.1f}"
                for x, y in pts
            )
            if path:
                width_px = 2.5 if label == "holdfast" else 1.5
                out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                           f'stroke-width="{width_px}"/>')
    if panels:
        for i, (label, _) in enumerate(panels[0][1]):
            color = HIGHLIGHT if label == "holdfast" else LINE_COLORS[i % len(LINE_COLORS)]
            lx = left + (i % 3) * 180
            ly = top + panel_h + 50 + (i // 3) * 20
            out.append(f'<rect x="{lx}" y="{ly - 9}" width="14" height="4" fill="{color}"/>')
            out.append(f'<text x="{lx + 20}" y="{ly - 4}" fill="{INK}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"

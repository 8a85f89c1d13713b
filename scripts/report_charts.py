"""report_charts.py - the charts of scripts/report.py, drawn with matplotlib (Debian's
python3-matplotlib; the Agg backend, no display needed).

Each function takes plain values prepared by report.py and returns a Figure; render()
turns a Figure into SVG text (for the HTML page) and PNG bytes (for the Markdown report).
Missing values get no bar and the word "missing" where the bar would be: a chart never
draws a number the records do not hold.
"""
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({"svg.hashsalt": "libdltrain-report", "font.size": 9, "axes.titlesize": 10,
                     "figure.dpi": 100, "svg.fonttype": "none"})

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
THERMAL_COLOR, POWER_COLOR = "#d62728", "#ff7f0e"


def sig(v):
    """A bar label: at least three significant digits (0.147 s, not 0.15)."""
    if v >= 100:
        return "{:,.0f}".format(v)
    return "{:.{}f}".format(v, 1 if v >= 10 else 2 if v >= 1 else 3 if v >= 0.1 else 4)


def mark_levels(xs, labels, span, char_frac=0.0095):
    """The row (0, 1, ...) above the top panel of each window mark, so that no two labels
    overlap: a label takes about char_frac of the axis per character (7-point text on the
    8.5-inch series figure) and moves up a row while it would run into one on its row.
    xs in data units, span the axis' data width."""
    ends, out = [], []  # ends[row]: where the last label on that row ends
    for x, lab in zip(xs, labels):
        w = (len(lab) + 1) * char_frac * span
        row = next((i for i, e in enumerate(ends) if x >= e), len(ends))
        if row == len(ends):
            ends.append(x + w)
        else:
            ends[row] = x + w
        out.append(row)
    return out


def bars(title, models, gpus, value, unit_of, fmt=sig):
    """One panel per model, one bar per GPU. value(model, gpu) -> (number or None, note or
    None, present) where present says whether the GPU ran the model at all; unit_of(model)
    is the panel's y label; fmt(number) its bar label."""
    n = len(models)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for i, m in enumerate(models):
        ax = axes[i // cols][i % cols]
        heights, labels = [], []
        for j, g in enumerate(gpus):
            v, note, present = value(m, g)
            labels.append(g)
            if v is None:
                heights.append(0)
                ax.text(j, 0, "missing" if present else "no run", ha="center", va="bottom",
                        fontsize=8, color="#666", rotation=90)
                continue
            heights.append(v)
            bar = ax.bar(j, v, width=0.6, color=COLORS[j % len(COLORS)], hatch="//" if note else None,
                         edgecolor="white" if not note else "#333")
            ax.bar_label(bar, labels=[fmt(v) + (" " + note if note else "")], fontsize=8, padding=2)
        ax.set_xlim(-0.7, len(gpus) - 0.3)
        ax.set_xticks(range(len(gpus)))
        ax.set_xticklabels([_wrap(g) for g in labels], fontsize=8)
        ax.set_title(_wrap(m, 40))
        ax.set_ylabel(unit_of(m))
        top = max([h for h in heights if h] or [1])
        ax.set_ylim(0, top * 1.22)
        ax.spines[["top", "right"]].set_visible(False)
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def series(title, s, intervals, windows):
    """Temperature, SM clock and power over time (three panels, shared x). s: dict of
    lists t_s, temp_c, sm_clock_mhz, power_w (None = no value); intervals: [(t0, t1, kind)]
    with kind "thermal" or "power", shaded; windows: [(t0, t1, label)] of epochs or bench
    configurations, marked on the time axis."""
    fig, axes = plt.subplots(3, 1, figsize=(8.5, 5.6), sharex=True)
    panels = [("temp_c", "temperature (C)", "#d62728"), ("sm_clock_mhz", "SM clock (MHz)", "#1f77b4"),
              ("power_w", "power (W)", "#2ca02c")]
    t = s.get("t_s") or []
    for ax, (key, label, color) in zip(axes, panels):
        ys = s.get(key) or []
        pts = [(x, y) for x, y in zip(t, ys) if x is not None and y is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, linewidth=1.2)
        else:
            ax.text(0.5, 0.5, "missing (NVML gave no values)", transform=ax.transAxes, ha="center",
                    va="center", color="#666")
        for (t0, t1, kind) in intervals:
            ax.axvspan(t0, t1, color=THERMAL_COLOR if kind == "thermal" else POWER_COLOR, alpha=0.18,
                       linewidth=0)
        for (t0, t1, _) in windows:
            ax.axvline(t0, color="#999", linewidth=0.6, linestyle=":")
        ax.set_ylabel(label)
        ax.spines[["top", "right"]].set_visible(False)
    if windows:
        lo, hi = axes[0].get_xlim()
        rows = mark_levels([w[0] for w in windows], [w[2] for w in windows], hi - lo)
        for (t0, t1, lab), row in zip(windows, rows):
            axes[0].annotate(lab, xy=(t0, 1.0), xycoords=("data", "axes fraction"), xytext=(1, 1 + 8 * row),
                             textcoords="offset points", fontsize=7, color="#666", va="bottom")
    axes[-1].set_xlabel("seconds since the run started")
    kinds = sorted({k for _, _, k in intervals})
    if kinds:
        from matplotlib.patches import Patch
        axes[0].legend(handles=[Patch(color=THERMAL_COLOR if k == "thermal" else POWER_COLOR, alpha=0.3,
                                      label=k + " throttling") for k in kinds], loc="lower right", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def render(fig):
    """(SVG text, PNG bytes) of a figure, which is then closed."""
    svg, png = io.StringIO(), io.BytesIO()
    fig.savefig(svg, format="svg", metadata={"Date": None})
    fig.savefig(png, format="png", dpi=90, metadata={"Software": None})
    plt.close(fig)
    return svg.getvalue(), png.getvalue()


def _wrap(s, width=18):
    words, lines, cur = s.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = (cur + " " + w).strip()
    lines.append(cur)
    return "\n".join(lines)

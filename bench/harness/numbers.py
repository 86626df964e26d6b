"""How the reports write numbers: durations in µs or ms, shares as percentages, counts
with thousands separators. Shared by report.py and the scenario modules that render
their own tables (threads_reuse.py)."""


def us(v):
    """A duration given in µs: `850 µs`, or `1.25 ms` from a millisecond on."""
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"


def pct(v):
    """A share (0.5) as a percentage with two decimals (`50.00%`)."""
    return f"{v * 100:.2f}%"


def count(v):
    """A count with thousands separators, no decimals (`40,000`)."""
    return f"{v:,.0f}"

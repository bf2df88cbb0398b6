"""plots/_plot.py - what every plots/*.py script shares (matplotlib + stdlib).

The examples write their tables with `--csv plots/csv` (`make plots` does
that first); each script reads them from plots/csv/ and writes PNGs into
plots/. Every figure carries a title, axis labels with units, a legend and
a caption line saying what to see, and says whether its data is synthetic.
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")                      # files only, no display needed
import matplotlib.pyplot as plt            # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CSV_DIR = os.path.join(HERE, "csv")

# One colour per method, the same in every figure.
COLOR = {
    "fp16": "#444444",
    "KIVI": "#1f77b4",
    "KIVI G=32": "#1f77b4",
    "KIVI G=128": "#6baed6",
    "HF": "#d62728",
    "HF-post": "#ff9896",
    "OTT": "#2ca02c",
    "LogQuant": "#9467bd",
    "random": "#7f7f7f",
}
STATE_COLOR = {"live": "#4c9a2a", "dead": "#d9534f", "empty": "#f0f0f0", "free": "#ffffff"}

SYNTHETIC = "Synthetic head (examples/common.h), not a model's K/V"


def rows(name):
    """The rows of plots/csv/NAME as dicts (strings); exits with a hint if the
    table has not been written yet."""
    path = os.path.join(CSV_DIR, name)
    if not os.path.exists(path):
        sys.exit("%s: missing - run `make plots` (it runs the examples with --csv %s)"
                 % (path, CSV_DIR))
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def figure(title, caption, ncols=1, nrows=1, size=(8, 4.8), **kw):
    """A figure with its title on top and its caption line at the bottom."""
    fig, axes = plt.subplots(nrows, ncols, figsize=size, **kw)
    fig.suptitle(title, fontsize=12, fontweight="bold")
    fig.text(0.5, 0.012, caption, ha="center", va="bottom", fontsize=8.5,
             style="italic", wrap=True)
    return fig, axes


def save(fig, name, bottom=0.16, top=0.88, **adjust):
    """Writes plots/NAME and says so; adjust: more subplots_adjust margins."""
    fig.subplots_adjust(bottom=bottom, top=top, **adjust)
    path = os.path.join(HERE, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("  wrote", os.path.relpath(path))

"""plots/logquant.py - chapter 6: LogQuant's selection.

  logquant_kept.png      which positions Algorithm 1 keeps in full precision
                         after every step, W = 4 (LogQuant Fig. 6); from
                         05_logquant section 1, read from the kvq cache.
  logquant_coverage.png  token coverage (Eq. 1, sinks 0-1 excluded) of
                         LogQuant's list A and of a recent window of 3W at
                         each evaluated decode step, on both heads (Fig. 4);
                         from 05_logquant section 2.
"""
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from _plot import COLOR, SYNTHETIC, figure, rows, save


def kept_map():
    r = rows("logquant_kept.csv")
    W = int(r[0]["window"])
    steps = max(int(x["step"]) for x in r)
    grid = [[0] * steps for _ in range(steps)]      # [step - 1][position]
    for x in r:
        grid[int(x["step"]) - 1][int(x["position"])] = 2
    for s in range(steps):                          # not yet written: blank
        for p in range(s + 1, steps):
            grid[s][p] = -1
    cmap = ListedColormap(["#ffffff", "#c6dbef", COLOR["LogQuant"]])
    shown = [[{-1: 0, 0: 1, 2: 2}[v] for v in row] for row in grid]
    fig, ax = figure(
        "LogQuant Algorithm 1 (W=%d): full-precision positions after each step (cf. Fig. 6)"
        % W,
        "What to see: once 3W = %d tokens are held, every other one of the oldest 2W is "
        "quantized, so the kept positions thin out going back (gaps 1, 2, 4, ...)\nwhile "
        "|A| stays between 2W and 3W; position 0 is never dropped. Positions only: this "
        "map does not depend on the data." % (3 * W), size=(10, 6.2))
    ax.imshow(shown, cmap=cmap, vmin=0, vmax=2, origin="upper", aspect="auto",
              interpolation="nearest", extent=(-0.5, steps - 0.5, steps + 0.5, 0.5))
    ax.set_xlabel("token position")
    ax.set_ylabel("decode step t (tokens appended)")
    ax.legend(handles=[Patch(color=COLOR["LogQuant"], label="full precision (list A)"),
                       Patch(color="#c6dbef", label="quantized (2-bit)"),
                       Patch(facecolor="#ffffff", edgecolor="#999999", label="not yet seen")],
              fontsize=8, loc="upper right")
    save(fig, "logquant_kept.png", bottom=0.17)


def coverage():
    data = {}
    for x in rows("logquant_coverage.csv"):
        data.setdefault((x["head"], x["selection"]), []).append(
            (int(x["tokens"]), float(x["coverage_x100"])))
    fig, axes = figure(
        "Token coverage (LogQuant Eq. 1, tokens 0-1 excluded): list A vs a recent window of 3W",
        "What to see: the curves track each other and list A is not higher (means in the "
        "legend). The paper's Fig. 4 has LogQuant's coverage clearly higher; not\nreproduced: "
        "with spikes at P(d) ~ 1/d, halving density while doubling reach keeps the sum of 1/d. "
        "Head B: spikes at log-uniform distances (Sec. 2.2). Synthetic heads.",
        ncols=2, size=(11, 4.8))
    names = {"A": "head A: sinks and outlier tokens", "B": "head B: log-decay spikes"}
    for ax, head in zip(axes, ("A", "B")):
        for sel, col in (("LogQuant A", COLOR["LogQuant"]), ("recent 3W", COLOR["KIVI"])):
            pts = data[(head, sel)]
            mean = sum(p[1] for p in pts) / len(pts)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, color=col,
                    label="%s (mean %.3f)" % (sel, mean))
        ax.set_title(names[head], fontsize=10)
        ax.set_xlabel("tokens in the cache at the evaluated step")
        ax.set_ylabel("Eq. 1: attention kept / 3W (x100)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    save(fig, "logquant_coverage.png", bottom=0.21)


if __name__ == "__main__":
    kept_map()
    coverage()

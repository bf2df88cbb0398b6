"""plots/ott.py - chapter 5: OTT's outlier tokens.

  ott_outlier_channel.png  the keys of the largest-magnitude channel, the
                           first 100 tokens raw and all tokens sorted
                           (OTT Fig. 1(d)/(e)); from 04_ott section 1.
  ott_fig1c.png            attention L1 loss against the number of tokens
                           kept in full precision, by selection rule
                           (OTT Fig. 1(c)); from 04_ott section 2.
"""
from matplotlib.patches import Patch

from _plot import COLOR, SYNTHETIC, figure, rows, save


def outlier_channel(n_raw=100):
    r = rows("ott_channel.csv")
    ch = r[0]["channel"]
    k = [float(x["k"]) for x in r]
    out = [int(x["outlier_token"]) for x in r]
    fig, (ar, as_) = figure(
        "Keys of outlier channel %s: raw and sorted (cf. OTT Fig. 1(d)/(e))" % ch,
        "What to see: the channel sits near one large value for almost every token; a few "
        "outlier tokens are near zero (red). Sorted, they form the\nshort tail on the left that "
        "stretches every per-channel group's [min, max] - the step every other token pays. "
        + SYNTHETIC + ".", ncols=2, size=(11, 4.8))
    n = min(n_raw, len(k))
    xs = list(range(n))
    ar.bar(xs, [abs(v) for v in k[:n]], color=["#d62728" if out[t] else COLOR["KIVI"]
                                               for t in xs], width=0.8)
    ar.plot([t for t in xs if out[t]], [1.2] * sum(out[:n]), "v", color="#d62728", ms=7)
    ar.legend(handles=[Patch(color=COLOR["KIVI"], label="ordinary token"),
                       Patch(color="#d62728", label="outlier token (truth), marked v")],
              fontsize=8, loc="upper center", ncol=2)
    ar.set_ylim(0, 1.3 * max(abs(v) for v in k[:n]))
    ar.set_title("(d) first %d tokens, in order" % n, fontsize=10)
    ar.set_xlabel("token (position)")
    ar.set_ylabel("|k| in channel %s (unitless)" % ch)
    order = sorted(range(len(k)), key=lambda t: abs(k[t]))
    as_.plot(range(len(k)), [abs(k[t]) for t in order], color=COLOR["KIVI"], lw=1.5,
             label="all %d tokens, sorted by |k|" % len(k))
    low = [(i, abs(k[t])) for i, t in enumerate(order) if out[t]]
    as_.plot([p[0] for p in low], [p[1] for p in low], "o", color="#d62728", ms=4,
             label="outlier tokens (%d)" % len(low))
    as_.set_title("(e) all tokens, sorted", fontsize=10)
    as_.set_xlabel("rank by |k| (ascending)")
    as_.set_ylabel("|k| in channel %s (unitless)" % ch)
    as_.legend(fontsize=8, loc="lower right")
    for ax in (ar, as_):
        ax.grid(alpha=0.3)
    save(fig, "ott_outlier_channel.png", bottom=0.2)


def draw_fig1c(table, title, caption, n_tokens, n_queries, out):
    """OTT Fig. 1(c) from 04_ott's ott_fig1c.csv rows (rule, n_kept, l1_loss);
    also used by real_model.py for the real head."""
    data = {}
    for x in table:
        data.setdefault(x["rule"], []).append((int(x["n_kept"]), float(x["l1_loss"])))
    fig, ax = figure(title, caption, size=(10, 5.2))
    style = {"smallest L1": (COLOR["OTT"], "o"), "random": (COLOR["random"], "s"),
             "largest L1": (COLOR["HF"], "^")}
    for rule, pts in data.items():
        # n = 0 cannot sit on a log axis: draw it at 0.5 and label the tick "0"
        xs = [p[0] if p[0] else 0.5 for p in pts]
        c, m = style.get(rule, ("k", "."))
        ax.plot(xs, [p[1] for p in pts], marker=m, color=c, label="keep the n %s" % (
            rule if rule != "random" else "random (mean of 8 draws)"))
    ax.set_xscale("log", base=2)
    ticks = sorted({p[0] for pts in data.values() for p in pts})
    ax.set_xticks([t if t else 0.5 for t in ticks])
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlabel("tokens kept in full precision, n (log scale; of %d)" % n_tokens)
    ax.set_ylabel("L1 loss, sum |out - ref| over %d queries" % n_queries)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3)
    save(fig, out, bottom=0.21)


def fig1c():
    draw_fig1c(
        rows("ott_fig1c.csv"),
        "Attention L1 loss vs tokens kept in full precision, by rule (cf. OTT Fig. 1(c))",
        "What to see: keeping the smallest-L1 keys out of the 2-bit groups cuts the loss once "
        "they cover the 20 outlier tokens; random and largest-L1 do nothing.\nThe paper finds "
        "largest-L1 clearly worst; here it ties with random. " + SYNTHETIC + ".",
        2048, 16, "ott_fig1c.png")


if __name__ == "__main__":
    outlier_channel()
    fig1c()

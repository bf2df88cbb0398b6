"""plots/real_model.py - chapter 10: the papers' claims on a real model
(SmolLM2-135M-Instruct run by examples/llm/llm.c; `make eval`, `make plots-real`).

  real_model_ppl.png   perplexity rise over fp32 of every cache on 2048 tokens
                       of GPL-3, against the bits per element it stored, with
                       its 95% interval (the CSV's dppl_pct_lo / dppl_pct_hi:
                       paired per-token differences, batch means)
                       (plots/csv/real_model_eval.csv, from `llm eval --csv`)
  real_kv_heatmap.png  |K| and |V| per channel x token of two real heads,
                       post-RoPE (KIVI Fig. 2 on real data); from the .npy
                       that `llm dump --out` writes
  real_key_stats.png   per layer: the largest/median channel magnitude of K
                       and of V, and how many tokens have a key L1 norm below
                       half the median (OTT Sec. 3.1's outlier tokens); and
                       one head's outlier channel, raw and sorted
                       (plots/csv/real_model_keys.csv, `llm dump --csv`)
  real_ott_fig1c.png   OTT Fig. 1(c) on the real head L3_H0: attention L1
                       loss vs tokens kept in full precision, by rule
                       (plots/csv/real/ott_fig1c.csv, from `04_ott --k ...
                       --csv plots/csv/real`)

usage: python3 plots/real_model.py [CSV_DIR [NPY_DIR [OUT_DIR]]]
       (defaults plots/csv, build/kv, plots). Each figure whose input is
       absent is skipped with a message, so `make plots` works without the
       model. Needs matplotlib only (the .npy files are read with the stdlib).
"""
import array
import ast
import csv
import os
import struct
import sys

from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

from _plot import COLOR, figure, save, HERE
from ott import draw_fig1c

REAL = "SmolLM2-135M-Instruct (real model), GPL-3 text"

FAMILY = {  # method -> (family label, colour)
    "fp32": ("reference", COLOR["fp16"]),
    "kivi4": ("KIVI", COLOR["KIVI"]), "kivi2": ("KIVI", COLOR["KIVI"]),
    "kivi2-g128": ("KIVI", COLOR["KIVI G=128"]),
    "kivi2-KtVt": ("KIVI Table 1 axes", "#8c564b"), "kivi2-KcVc": ("KIVI Table 1 axes", "#8c564b"),
    "kivi2-KtVc": ("KIVI Table 1 axes", "#8c564b"),
    "kivi-K2V4": ("KIVI, one side at 4 bits", "#17becf"),
    "kivi-K4V2": ("KIVI, one side at 4 bits", "#17becf"),
    "hf4": ("HF today (float zero)", COLOR["HF"]), "hf2": ("HF today (float zero)", COLOR["HF"]),
    "hf4-int": ("HF post (integer zero)", COLOR["HF-post"]),
    "hf2-int": ("HF post (integer zero)", COLOR["HF-post"]),
    "ott2": ("OTT", COLOR["OTT"]), "logquant2": ("LogQuant", COLOR["LogQuant"]),
    "streaming": ("eviction at KIVI-2's bytes", "#ff7f0e"), "h2o": ("eviction at KIVI-2's bytes", "#ff7f0e"),
    "snapkv": ("eviction at KIVI-2's bytes", "#ff7f0e"),
    "kivi-evict": ("eviction of the rest (LogQuant T2)", "#7f7f7f"),
    "logquant-evict": ("eviction of the rest (LogQuant T2)", "#7f7f7f"),
}
for _m in ("kivi4", "kivi2", "kivi2-KtVt", "hf4", "hf2"):   # the -rot twins
    FAMILY[_m + "-rot"] = ("rotated before quantizing (Hadamard)", "#e377c2")


# rows that `make eval` leaves out (llm.c's diagnostics, run with --only;
# the committed full run, walkthrough/10_eval/, has them): not charted
DIAGNOSTIC = ("fp16", "sink-evict")
# the formats engines ship (issue 47): one family per kind of grid
for _m in ("fp8-e4m3", "fp8-e4m3-pth", "fp8-e5m2"):
    FAMILY[_m] = ("engines: FP8", "#000080")
for _m in ("int8-pth", "int4-pth", "q8_0", "q4_0"):
    FAMILY[_m] = ("engines: int (vLLM pth, llama.cpp)", "#bcbd22")
for _m in ("nvfp4", "nvfp4-4over6"):
    FAMILY[_m] = ("engines: NVFP4", "#c51b7d")
for _m in ("turboquant-k8v4", "turboquant-4bit-nc", "turboquant-k3v4-nc", "turboquant-3bit-nc"):
    FAMILY[_m] = ("engines: TurboQuant (vLLM)", "#8c6d31")

# where a point's label goes (points): neighbours that would collide
LABEL_OFFSET = {"kivi2-KcVc": (5, -10), "kivi2-KtVt": (-62, 3), "h2o": (5, 4),
                "streaming": (5, -9), "hf4": (5, 6), "hf4-rot": (5, -3), "hf4-int": (5, -12),
                "hf2-int": (5, -10), "kivi2-KtVt-rot": (-78, 2), "ott2": (-28, -9),
                "logquant2": (5, -11)}


def read_csv(path):
    if not os.path.exists(path):
        print("  skip: %s absent (run `make eval` / `make plots-real` with the model)" % path)
        return None
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_npy(path):
    """A little-endian float32 C-order .npy as (flat array, shape)."""
    with open(path, "rb") as f:
        b = f.read()
    if b[:6] != b"\x93NUMPY":
        raise ValueError("%s: not a .npy file" % path)
    if b[6] == 1:
        hlen, start = struct.unpack("<H", b[8:10])[0], 10
    else:
        hlen, start = struct.unpack("<I", b[8:12])[0], 12
    h = ast.literal_eval(b[start:start + hlen].decode("latin1"))
    if h["descr"] != "<f4" or h["fortran_order"]:
        raise ValueError("%s: expected <f4, C order" % path)
    a = array.array("f")
    a.frombytes(b[start + hlen:])
    return a, tuple(h["shape"])


def interval(r):
    """(lo, hi) of a row's 95% interval on its rise over fp32, in percent,
    or None where the CSV has none (a text too short: eval writes 0, 0)."""
    try:
        y, lo, hi = float(r["dppl_pct"]), float(r["dppl_pct_lo"]), float(r["dppl_pct_hi"])
    except (KeyError, ValueError):
        return None
    return (lo, hi) if lo <= y <= hi and lo < hi else None


def errs(rows, key):
    """matplotlib's asymmetric error array [below, above] for rows, each
    value key(row) on the interval's scale (0 where a row has none)."""
    below, above = [], []
    for r in rows:
        iv, y = interval(r), key(r, float(r["dppl_pct"]))
        below.append(y - key(r, iv[0]) if iv else 0.0)
        above.append(key(r, iv[1]) - y if iv else 0.0)
    return [below, above]


def ppl_chart(rows, out):
    """Perplexity rise (symmetric log scale) vs bits, one labelled point per method."""
    fp = [r for r in rows if r["method"] == "fp32"]
    if not fp:
        print("  skip: no fp32 row in real_model_eval.csv")
        return
    by = {r["method"]: r for r in rows}

    def d(m):
        return "%s %+.1f%%" % (m, float(by[m]["dppl_pct"])) if m in by else "%s (not run)" % m
    fig, (ax, bx) = figure(
        "Every kvq cache on a real model: perplexity rise vs bits stored",
        "What to see: the rise each cache costs at the bits it really stores (bars: 95%% "
        "intervals, paired per token against fp32): %s, %s, %s, %s "
        "(HF's float32 rows), %s;\n"
        "%s vs %s; %s; eviction at KIVI-2's bytes: %s, %s, %s;\n"
        "only the full-precision set kept (LogQuant Table 2): %s, %s. fp32 perplexity %.2f. %s."
        % (d("kivi4"), d("hf4"), d("kivi2"), d("hf2"), d("hf2-int"), d("ott2"), d("kivi2-g128"),
           d("logquant2"), d("streaming"), d("h2o"), d("snapkv"), d("kivi-evict"),
           d("logquant-evict"), float(fp[0]["ppl"]), REAL),
        ncols=2, size=(13, 5.6), gridspec_kw={"width_ratios": [1.1, 1]})
    rows = [r for r in rows if not r["method"].endswith("-R1")  # axes_chart draws those
            and r["method"] not in DIAGNOSTIC]
    seen = set()
    for r in rows:
        if r["method"] == "fp32":
            continue
        fam, c = FAMILY.get(r["method"], ("other", "k"))
        x, y = float(r["bits"]), float(r["dppl_pct"])
        ax.errorbar([x], [y], yerr=errs([r], lambda r, v: v), fmt="o", color=c, ms=7,
                    elinewidth=1.2, capsize=3, label=fam if fam not in seen else None)
        seen.add(fam)
        ax.annotate(r["method"], (x, y), textcoords="offset points",
                    xytext=LABEL_OFFSET.get(r["method"], (5, 3)), fontsize=7.5)
    # symmetric log: a cache within rounding noise of fp32 (a rise near 0,
    # or just below it) stays on the chart, linear within +-1%
    ax.set_yscale("symlog", linthresh=1.0)
    ax.axhline(0.0, color=COLOR["fp16"], ls="--", lw=1)
    ax.set_xlabel("bits per stored K/V element (kvq_cache_bytes; fp32 = 32)")
    ax.set_ylabel("perplexity rise over fp32, % (log scale, linear within 1%)")
    ax.set_title("(a) quality vs memory", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7.5, loc="lower left")
    # (b) the table as bars, sorted by perplexity
    rs = sorted((r for r in rows if r["method"] != "fp32"), key=lambda r: float(r["ppl"]))
    names = [r["method"] for r in rs]
    vals = [float(r["ppl"]) for r in rs]
    fp_ppl = float(fp[0]["ppl"])
    # the interval on the ratio to fp32, drawn on the perplexity scale
    bx.barh(range(len(rs)), vals, color=[FAMILY.get(n, ("", "k"))[1] for n in names],
            xerr=errs(rs, lambda r, v: fp_ppl * (1.0 + v / 100.0)), error_kw={"lw": 1, "capsize": 2})
    bx.axvline(float(fp[0]["ppl"]), color=COLOR["fp16"], ls="--", lw=1, label="fp32")
    for i, r in enumerate(rs):
        iv = interval(r)
        bx.text(fp_ppl * (1.0 + iv[1] / 100.0) if iv else vals[i], i,
                " %.2f (%+.1f%%%s, %.2f b)" % (vals[i], float(r["dppl_pct"]),
                                               " [%+.1f, %+.1f]" % iv if iv else "",
                                               float(r["bits"])), va="center", fontsize=6.5)
    bx.set_yticks(range(len(rs)))
    bx.set_yticklabels(names, fontsize=8)
    bx.invert_yaxis()
    bx.set_xscale("log")
    bx.set_xlim(0.8 * fp_ppl, 12 * max(vals))
    bx.xaxis.set_major_locator(FixedLocator([t for t in (10, 20, 50, 100, 200, 500)
                                             if bx.get_xlim()[0] <= t <= bx.get_xlim()[1]]))
    bx.xaxis.set_major_formatter(ScalarFormatter())
    bx.xaxis.set_minor_formatter(NullFormatter())
    bx.set_xlabel("perplexity on 2047 scored tokens (log scale)")
    bx.set_title("(b) perplexity, best first, with the 95% interval", fontsize=10)
    bx.legend(fontsize=8, loc="upper right")
    bx.grid(alpha=0.3, axis="x", which="both")
    save(fig, os.path.join(out, "real_model_ppl.png"), bottom=0.22, wspace=0.32)


AXES = [("KcVt", "K per-channel, V per-token (KIVI)"), ("KtVt", "K per-token, V per-token"),
        ("KcVc", "K per-channel, V per-channel"), ("KtVc", "K per-token, V per-channel")]


def axes_chart(rows, out):
    """KIVI Table 1's four K/V axis pairs at 2 bits, with KIVI's 128-token
    window and with every token quantized (the -R1 rows)."""
    by = {r["method"]: r for r in rows}
    windowed = {"KcVt": "kivi2"}
    need = [windowed.get(a, "kivi2-" + a) for a, _ in AXES] + ["kivi2-%s-R1" % a for a, _ in AXES]
    if "fp32" not in by or any(m not in by for m in need):
        print("  skip: real_model_eval.csv lacks the KIVI axis rows (run `make eval`)")
        return
    fig, ax = figure(
        "KIVI Table 1's K/V axis pairs on a real model, 2 bits, G = 32",
        "What to see: per-token keys cost far more than per-channel values, with or without "
        "the full-precision window; K per-channel + V per-channel stays\nsecond (KIVI's "
        "Llama-2 and Mistral-7B put it third, its Falcon-7B second); the window lowers every "
        "pair's loss. Whiskers: 95% intervals (paired per token against fp32). " + REAL + ".",
        size=(10, 5))
    top = 1.0
    width = 0.38
    for k, (label, suffix, color) in enumerate((
            ("every token quantized (Table 1's setting; -R1 rows)", "-R1", "#8c564b"),
            ("KIVI's cache: last 128 tokens in full precision", "", COLOR["KIVI"]))):
        xs, ys, rs = [], [], []
        for i, (a, _) in enumerate(AXES):
            m = "kivi2-%s%s" % (a, suffix) if suffix or a != "KcVt" else "kivi2"
            xs.append(i + (k - 0.5) * width)
            ys.append(float(by[m]["dppl_pct"]))
            rs.append(by[m])
        ax.bar(xs, ys, width, color=color, label=label, yerr=errs(rs, lambda r, v: v),
               error_kw={"lw": 1, "capsize": 3})
        top = max(top, max(ys))
        for x, y, r in zip(xs, ys, rs):      # above the whisker
            ax.text(x, (interval(r) or (y, y))[1], "%+.0f%%" % y, ha="center", va="bottom",
                    fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(top=8 * top)          # room for the legend above the bars
    ax.set_xticks(range(len(AXES)))
    ax.set_xticklabels([t for _, t in AXES], fontsize=8)
    ax.set_ylabel("perplexity rise over fp32, % (log scale)")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3, axis="y", which="both")
    save(fig, os.path.join(out, "real_kivi_axes.png"))


def heatmap(npy_dir, heads, out, n_tok=512):
    """|K| and |V| (channel x token) for each (layer, head) in heads."""
    data = []
    for L, H in heads:
        pk = os.path.join(npy_dir, "L%d_H%d_k.npy" % (L, H))
        pv = os.path.join(npy_dir, "L%d_H%d_v.npy" % (L, H))
        if not (os.path.exists(pk) and os.path.exists(pv)):
            print("  skip: %s absent (run `make plots-real`)" % pk)
            return
        data.append((L, H, read_npy(pk), read_npy(pv)))
    fig, axes = figure(
        "Real post-RoPE keys and values, |x| per channel and token (cf. KIVI Fig. 2, OTT Fig. 1(a-b))",
        "What to see: one or two key channels (rows) stay large across all tokens; value rows are "
        "far more even; red marks: tokens whose keys are small\nin every channel (OTT's outlier "
        "tokens: the first token, some ' ' and ' the'). Channels in the GGUF's RoPE order "
        "(pairs 2i, 2i+1). " + REAL + ".",
        ncols=2, nrows=len(data), size=(13, 3.4 * len(data) + 1.2))
    for row, (L, H, (K, ks), (V, vs)) in enumerate(data):
        n, D = ks
        n = min(n, n_tok)
        for col, (X, what) in enumerate(((K, "keys"), (V, "values"))):
            ax = axes[row][col]
            img = [[abs(X[t * D + d]) for t in range(n)] for d in range(D)]
            im = ax.imshow(img, aspect="auto", cmap="viridis", interpolation="nearest")
            if what == "keys":     # mark the tokens whose key L1 < median/2
                l1 = [sum(abs(X[t * D + d]) for d in range(D)) for t in range(ks[0])]
                med = sorted(l1)[len(l1) // 2]
                low = [t for t in range(n) if l1[t] < 0.5 * med]
                ax.plot(low, [-1.5] * len(low), "v", color="#d62728", ms=5, clip_on=False,
                        label="key L1 < median/2 (%d tokens)" % len(low))
                ax.set_ylim(D - 0.5, -2.5)
                ax.legend(fontsize=7, loc="lower right")
            ax.set_title("layer %d, KV head %d: |%s|, first %d tokens" % (L, H, what, n),
                         fontsize=9.5)
            ax.set_xlabel("token position")
            ax.set_ylabel("channel")
            fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02, label="|x|")
    save(fig, os.path.join(out, "real_kv_heatmap.png"), bottom=0.11, top=0.9, hspace=0.45, wspace=0.3)


def key_stats(rows, npy_dir, head, out):
    """Per layer (mean over KV heads): K and V max/median channel ratio and
    low-L1 token counts; plus one head's outlier channel, raw and sorted."""
    layers = sorted({int(r["layer"]) for r in rows})

    def per_layer(key):
        return [sum(float(r[key]) for r in rows if int(r["layer"]) == L) /
                sum(1 for r in rows if int(r["layer"]) == L) for L in layers]
    fig, (ax, bx) = figure(
        "Real keys: outlier channels (KIVI Sec. 3.2) and low-magnitude outlier tokens (OTT Sec. 3.1)",
        "What to see: (a) keys have a channel ~6-15x the median channel from layer 1 on, values "
        "~2-4x (layer 0 reverses it); bars: tokens with key L1\nbelow half the median: 10-16 in "
        "layers 1-10, deeper at most the first. (b) most tokens share one band, a few sit far "
        "below. " + REAL + ", 1024 tokens.", ncols=2, size=(13, 5.2))
    ax.plot(layers, per_layer("k_ratio"), "o-", color=COLOR["KIVI"], label="keys")
    ax.plot(layers, per_layer("v_ratio"), "s-", color=COLOR["HF"], label="values")
    ax.set_xlabel("layer")
    ax.set_ylabel("largest / median channel mean |x| (mean over 3 KV heads)")
    ax.set_ylim(0, 1.3 * max(per_layer("k_ratio") + per_layer("v_ratio")))  # room: legend
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    ax2.bar(layers, per_layer("low_tokens"), color=COLOR["OTT"], alpha=0.35,
            label="tokens with key L1 < median/2")
    ax2.set_ylabel("tokens with key L1 < median / 2 (of %s)" % rows[0]["tokens"])
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7.5, loc="upper center", ncol=3)
    ax2.set_ylim(0, 1.3 * max(per_layer("low_tokens")))
    ax.set_title("(a) per layer", fontsize=10)
    L, H = head
    pk = os.path.join(npy_dir, "L%d_H%d_k.npy" % (L, H))
    st = [r for r in rows if int(r["layer"]) == L and int(r["head"]) == H]
    if os.path.exists(pk) and st:
        K, (n, D) = read_npy(pk)
        ch = int(st[0]["top_channel"])
        col = [K[t * D + ch] for t in range(n)]
        l1 = [sum(abs(K[t * D + d]) for d in range(D)) for t in range(n)]
        med = sorted(l1)[n // 2]
        low = [t for t in range(n) if l1[t] < 0.5 * med]
        sign = 1 if sum(col) > 0 else -1     # sort toward the channel's bulk
        order = sorted(range(n), key=lambda t: sign * col[t])
        bx.plot(range(n), [col[t] for t in order], color=COLOR["KIVI"], lw=1.5,
                label="channel %d, all %d tokens sorted" % (ch, n))
        pos = {t: i for i, t in enumerate(order)}
        bx.plot([pos[t] for t in low], [col[t] for t in low], "o", color=COLOR["HF"], ms=4,
                label="tokens with key L1 < median/2 (%d)" % len(low))
        bx.set_xlabel("rank (tokens sorted by the channel's value)")
        bx.set_ylabel("key value in channel %d" % ch)
        bx.set_title("(b) layer %d, KV head %d: its outlier channel" % (L, H), fontsize=10)
        bx.legend(fontsize=8, loc="lower right")
        bx.grid(alpha=0.3)
    else:
        bx.text(0.5, 0.5, "%s absent" % pk, ha="center", transform=bx.transAxes)
    save(fig, os.path.join(out, "real_key_stats.png"), bottom=0.18, wspace=0.35)


def main():
    csv_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "csv")
    npy_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "build", "kv")
    out = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else HERE
    ev = read_csv(os.path.join(csv_dir, "real_model_eval.csv"))
    if ev:
        ppl_chart(ev, out)
        axes_chart(ev, out)
    heatmap(npy_dir, [(3, 0), (20, 0)], out)
    ks = read_csv(os.path.join(csv_dir, "real_model_keys.csv"))
    if ks:
        key_stats(ks, npy_dir, (3, 0), out)
    f1c = read_csv(os.path.join(csv_dir, "real", "ott_fig1c.csv"))
    if f1c:
        draw_fig1c(
            f1c, "Attention L1 loss vs tokens kept in full precision, on a real head "
            "(cf. OTT Fig. 1(c))",
            "What to see: on this head, keeping the smallest-L1 keys exact makes the loss "
            "larger, not smaller (the paper's Fig. 1(c) and our synthetic head say the\n"
            "opposite), and the largest-L1 rule helps most. Layer 3, KV head 0, 1024 tokens, "
            "2-bit K per-channel G = 128; " + REAL + ".",
            1024, 3072, os.path.join(out, "real_ott_fig1c.png"))


if __name__ == "__main__":
    main()

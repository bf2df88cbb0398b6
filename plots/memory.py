"""plots/memory.py - chapters 1 and 2: what a cache costs.

  memory_vs_length.png  payload of one head against sequence length for fp16,
                        KIVI, OTT and LogQuant (OTT Fig. 3(c)); slopes are the
                        compression ratios. From 01_quant_basics section 6.
  bits_vs_length.png    bits per element of a KIVI-2 cache against length,
                        beside the B + 32/G asymptote and LogQuant's Eq. 5.
                        From 01_quant_basics section 5.
"""
from _plot import COLOR, figure, rows, save


def color_of(cache):
    for key in ("fp16", "OTT", "LogQuant"):
        if cache.startswith(key):
            return COLOR[key]
    return COLOR["KIVI G=32"] if "G=32" in cache else COLOR["KIVI G=128"]


def memory_vs_length():
    data = {}
    for r in rows("memory_vs_length.csv"):
        data.setdefault(r["cache"], []).append((int(r["tokens"]), int(r["payload_bytes"])))
    fig, (ax, axz) = figure(
        "KV memory vs sequence length, one head (D=128), 2-bit (cf. OTT Fig. 3(c))",
        "What to see: each quantized line's slope is 2D(B+32/G)/8 bytes per token (ratio vs "
        "fp16 in the legend). Right: the saw-teeth are the full-precision\nwindows filling "
        "and being quantized; they are bounded, so they vanish from the slope. Synthetic data "
        "(sampled every 64 tokens; bytes barely depend on it).", ncols=2, size=(11, 5))
    for cache, pts in data.items():
        t = [p[0] for p in pts]
        kib = [p[1] / 1024 for p in pts]
        half = len(pts) // 2
        slope = (pts[-1][1] - pts[half - 1][1]) / (pts[-1][0] - pts[half - 1][0])
        label = "%s: %.1f B/token" % (cache, slope)
        ax.plot(t, kib, color=color_of(cache), label=label, lw=1.8,
                ls="--" if cache.startswith("fp16") else "-")
        if not cache.startswith("fp16"):
            axz.plot(t[:24], kib[:24], color=color_of(cache), label=cache, lw=1.8,
                     marker=".", ms=4)
    fp = data["fp16"]
    fp_slope = (fp[-1][1] - fp[len(fp) // 2 - 1][1]) / (fp[-1][0] - fp[len(fp) // 2 - 1][0])
    handles, labels = ax.get_legend_handles_labels()
    for i, lab in enumerate(labels):
        if not lab.startswith("fp16"):
            s = float(lab.split(": ")[1].split(" ")[0])
            labels[i] = "%s (%.2fx)" % (lab, fp_slope / s)
    ax.legend(handles, labels, fontsize=8, loc="upper left")
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("cache payload (KiB, K + V, one head)")
    ax.set_title("whole run: slope = bytes per token", fontsize=10)
    ax.grid(alpha=0.3)
    axz.set_xlabel("sequence length (tokens)")
    axz.set_ylabel("cache payload (KiB)")
    axz.set_title("first 1,536 tokens: the full-precision windows", fontsize=10)
    axz.legend(fontsize=8, loc="upper left")
    axz.grid(alpha=0.3)
    save(fig, "memory_vs_length.png", bottom=0.2)


def bits_vs_length():
    data = {}
    for r in rows("bits_vs_length.csv"):
        data.setdefault(int(r["group"]), []).append(
            (int(r["tokens"]), float(r["bits_measured"]), float(r["bits_asymptote"]),
             float(r["eq5_ratio"])))
    fig, ax = figure(
        "Bits per stored element of a KIVI-2 cache (D=128, R=128) vs length",
        "What to see: the measured bits fall toward B + 32/G (dotted) as the fp16 residual's "
        "share shrinks;\nLogQuant's Eq. 5 (2 bits, no scale/zero) converted to bits sits below "
        "every measurement. Synthetic data (bytes do not depend on it).", size=(8, 5))
    for g, pts in sorted(data.items()):
        col = COLOR["KIVI G=32"] if g == 32 else COLOR["KIVI G=128"]
        t = [p[0] for p in pts]
        ax.plot(t, [p[1] for p in pts], marker="o", color=col, label="measured, G=%d" % g)
        ax.axhline(pts[0][2], color=col, ls=":", label="B + 32/G = %.2f (G=%d)" % (pts[0][2], g))
        if g == 128:    # Eq. 5 has no G: the same line for both (residual alike)
            ax.plot(t, [16 / p[3] for p in pts], ls="--", color="#9467bd",
                    label="LogQuant Eq. 5 as bits (16 / ratio): no scale/zero, -> 2")
    ax.set_xscale("log")
    ax.set_xlabel("sequence length T (tokens, log scale)")
    ax.set_ylabel("payload bits per element (K and V)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    save(fig, "bits_vs_length.png", bottom=0.2)


if __name__ == "__main__":
    memory_vs_length()
    bits_vs_length()

"""plots/kivi.py - chapters 3 and 4: KIVI's axes and schedule, HF's scheme.

  kv_magnitude.png  |K| and |V| per channel x token of the head 02_kivi
                    quantizes (KIVI Fig. 2, OTT Fig. 1(a)/(b)).
  kivi_windows.png  full-precision rows per side after every decode step
                    (Algorithm 1: keys saw-tooth 1..R, values stay at R).
  hf_vs_kivi.png    K, V, score and output errors of KIVI and HF's two zero
                    rules (today's float zero, the post's integer zero) at 2
                    and 4 bits (03_hf section 3).
"""
from _plot import COLOR, SYNTHETIC, figure, rows, save


def kv_magnitude(n_show=256):
    r = rows("kivi_kv.csv")
    T = max(int(x["token"]) for x in r) + 1
    D = max(int(x["channel"]) for x in r) + 1
    n = min(T, n_show)                     # thin outlier-token rows stay visible
    K = [[0.0] * D for _ in range(n)]
    V = [[0.0] * D for _ in range(n)]
    outlier = [0] * n
    for x in r:
        t, d = int(x["token"]), int(x["channel"])
        if t >= n:
            continue
        K[t][d] = abs(float(x["k"]))
        V[t][d] = abs(float(x["v"]))
        outlier[t] = int(x["outlier_token"])
    vmax = max(max(row) for row in K)
    fig, (ak, av) = figure(
        "Key and value magnitude per channel x token (cf. KIVI Fig. 2, OTT Fig. 1(a)/(b))",
        "What to see: keys have a few fixed channels of large magnitude (bright columns), values "
        "have none; the dark gaps in the bright key columns\nare the outlier tokens (OTT, marked "
        "by triangles), small in exactly those channels. Same colour scale in both panels. "
        "First %d of %d tokens. %s." % (n, T, SYNTHETIC), ncols=2, size=(11, 5.4))
    for ax, M, name in ((ak, K, "keys |k|"), (av, V, "values |v|")):
        im = ax.imshow(M, aspect="auto", origin="lower", cmap="magma", vmin=0, vmax=vmax,
                       interpolation="nearest", extent=(-0.5, D - 0.5, -0.5, n - 0.5))
        ax.set_title("%s, %d tokens x %d channels" % (name, n, D), fontsize=10)
        ax.set_xlabel("channel (index)")
        ax.set_ylabel("token (position)")
        ax.set_xlim(-0.5, D + 3.5)
    marks = [t for t in range(n) if outlier[t]]
    ak.plot([D + 1.5] * len(marks), marks, "<", color="#2ca02c", ms=6,
            label="outlier tokens (generator truth): %d here" % len(marks))
    ak.legend(loc="center", fontsize=8, framealpha=0.9)
    av.plot([], [], " ", label="values: i.i.d. N(0, 1)")
    av.legend(loc="upper right", fontsize=8, framealpha=0.9)
    cax = fig.add_axes([0.915, 0.2, 0.013, 0.66])
    cb = fig.colorbar(im, cax=cax)
    cb.set_label("magnitude |x| (unitless, as generated)")
    save(fig, "kv_magnitude.png", bottom=0.2, right=0.9, left=0.06, wspace=0.18)


def kivi_windows():
    r = rows("kivi_windows.csv")
    step = [int(x["step"]) for x in r]
    kw = [int(x["k_window"]) for x in r]
    vw = [int(x["v_window"]) for x in r]
    fig, ax = figure(
        "KIVI-2 streaming cache (G=32, R=128): full-precision rows after each decode step",
        "What to see: the key residual fills to R and is quantized all at once (saw-tooth, "
        "mean (R+1)/2 = 64.5);\nthe value window slides and never leaves R = 128 "
        "(one value quantized per step). " + SYNTHETIC + ".",
        size=(9, 4.8))
    ax.plot(step, kw, color=COLOR["KIVI"], label="keys in fp16 (per-channel: flush R at a time)")
    ax.plot(step, vw, color=COLOR["HF"], label="values in fp16 (per-token: sliding window)")
    ax.axhline(sum(kw) / len(kw), color=COLOR["KIVI"], ls=":",
               label="key mean %.2f (paper: about R/2)" % (sum(kw) / len(kw)))
    ax.set_xlabel("decode step (after a 300-token prefill)")
    ax.set_ylabel("full-precision rows (tokens)")
    ax.set_ylim(0, 180)
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    ax.grid(alpha=0.3)
    save(fig, "kivi_windows.png", bottom=0.22)


def hf_vs_kivi():
    r = rows("hf_vs_kivi.csv")
    metrics = [("k_err", "K err"), ("v_err", "V err"), ("k_err_at_a", "K err @ attention"),
               ("a_err", "score err"), ("out_err", "output err")]
    schemes = [("KIVI", "KIVI: K per-channel, float zero"),
               ("HF", "HF today: K per-token, float zero"),
               ("HF-post", "HF post: K per-token, integer zero")]
    fig, axes = figure(
        "KIVI vs the HF QuantizedCache schedule on one head (T=4096, D=128)",
        "What to see: at 2 bits HF's per-token keys lose far more than KIVI's, and today's float "
        "zero (quanto >= 0.2.3) twice what the post's integer zero loses:\nmost key values sit "
        "near 0, which only the integer grid holds. At 4 bits the two HF rules are level. Relative "
        "Frobenius errors against the exact head. " + SYNTHETIC + ".",
        ncols=2, size=(11, 4.8), sharey=False)
    width = 0.27
    for ax, bits in zip(axes, ("2", "4")):
        sel = {x["scheme"]: x for x in r if x["bits"] == bits}
        xs = range(len(metrics))
        for j, (scheme, label) in enumerate(schemes):
            vals = [float(sel[scheme][m]) for m, _ in metrics]
            ax.bar([x + (j - 1) * width for x in xs], vals, width, color=COLOR[scheme],
                   label=label)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([lab for _, lab in metrics], rotation=20, fontsize=8)
        ax.set_title("%s-bit" % bits, fontsize=10)
        ax.set_ylabel("relative error ||x - x'|| / ||x||")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    save(fig, "hf_vs_kivi.png", bottom=0.26)


if __name__ == "__main__":
    kv_magnitude()
    kivi_windows()
    hf_vs_kivi()

"""GPU decode-attention bandwidth against the copy roof (walkthrough ch. 9).

Reads bench/gpu_attention.csv (written by `make bench-gpu`, i.e.
build/bench_gpu --csv bench) and, if present, bench/gpu_sdpa.csv (written by
bench/sdpa_baseline.py --csv) and draws achieved GB/s vs T for the fused
2-bit/4-bit kernel, our fp16 kernel and PyTorch SDPA, with the measured
device-to-device copy bandwidth as the roof. The fused curves are the
library's path (`fused`, or version 3 in older CSVs). Output: plots/gpu_roofline.png.
Usage: python3 plots/gpu_roofline.py [bench_dir] [out_dir]"""
import csv, os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))

def default_gbps(r):
    """GB/s of kvq_cuda_attend as the library runs it: the `fused` column,
    or in CSVs written before the one-path cleanup, version 3 (32-token
    tiles) where present, else version 2 (at G = 32 they agree)."""
    for col in ("fused_gbps", "v3_gbps", "v2_gbps"):
        if r.get(col):
            return float(r[col])
    raise KeyError("no attention GB/s column")

def main():
    bench = sys.argv[1] if len(sys.argv) > 1 else "bench"
    out = sys.argv[2] if len(sys.argv) > 2 else "plots"
    attn = rows(os.path.join(bench, "gpu_attention.csv"))
    sdpa_path = os.path.join(bench, "gpu_sdpa.csv")
    sdpa = rows(sdpa_path) if os.path.exists(sdpa_path) else []
    S = max(int(r["S"]) for r in attn)      # the largest batch x heads
    copy = float(attn[0]["copy_gbps"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for ax, gqa in zip(axes, ("1", "4")):
        sel = [r for r in attn if r["gqa"] == gqa and int(r["S"]) == S and r["valid"] == "1"]
        for (B, G), style in {("2", "32"): "o-", ("2", "128"): "s-", ("4", "32"): "^--", ("4", "128"): "v--"}.items():
            pts = sorted((int(r["T"]), default_gbps(r)) for r in sel if r["B"] == B and r["G"] == G)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=f"fused {B}-bit, G={G}")
        fp = sorted({(int(r["T"]), float(r["fp16_gbps"])) for r in sel})
        if fp:
            ax.plot([p[0] for p in fp], [p[1] for p in fp], "k:", marker="x", label="kvq fp16 kernel")
        sd = sorted((int(float(r["T"])), float(r["sdpa_gbps"])) for r in sdpa
                    if r["gqa"] == gqa and int(float(r["S"])) == S)
        if sd:
            ax.plot([p[0] for p in sd], [p[1] for p in sd], "-", color="gray", marker="d",
                    label="PyTorch SDPA fp16")
        ax.axhline(copy, color="red", lw=2, label=f"copy roof {copy:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length T (tokens)")
        ax.set_title(f"GQA ratio {gqa}, batch x KV heads = {S}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("achieved bandwidth (GB/s of bytes the call must move)")
    axes[1].legend(*axes[0].get_legend_handles_labels(), fontsize=8, loc="center right", bbox_to_anchor=(1.0, 0.62))
    fig.suptitle("Fused decode attention vs the memory roof (D = 128, KIVI steady state, measured)")
    fig.text(0.5, 0.005, "What to see: how close each kernel gets to the red copy roof; the quantized "
             "kernels move 3-7x fewer bytes, so equal GB/s means 3-7x less time.",
             ha="center", fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "gpu_roofline.png")
    fig.savefig(path, dpi=110)
    print("wrote", path)

if __name__ == "__main__":
    main()

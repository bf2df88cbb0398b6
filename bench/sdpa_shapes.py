"""PyTorch's fp16 scaled_dot_product_attention (decode: one query token) at
the shapes given, timed as bench/sdpa_baseline.py times it (its median_ms:
CUDA events, 3 warm-up calls, median of 25, K/V copies rotated so that L2
does not serve them); bench/gpu_campaign.sh's SDPA step. S = batch x KV
heads streams of T tokens, D = 128, GQA query heads per KV head (batch =
S / 8, 8 KV heads, as sdpa_baseline.py). bytes = K + V (fp16) + q + out.

  python3 bench/sdpa_shapes.py --T 32768 --S 64,256 --gqa 1,4,8 [--csv FILE]

--csv FILE appends one row per shape as it is measured (a header when the
file is new). Needs torch with CUDA; exit status 1 without them."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def ints(text):
    try:
        vals = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use comma-separated integers")
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be >= 1")
    return vals


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--T", type=ints, default=[32768])
    ap.add_argument("--S", type=ints, default=[64, 256])
    ap.add_argument("--gqa", type=ints, default=[1, 4, 8])
    ap.add_argument("--csv")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from sdpa_baseline import median_ms
    except ImportError as e:
        sys.exit(f"sdpa_shapes: {e} (needs torch; bench/sdpa_baseline.py beside this file)")
    if not torch.cuda.is_available():
        sys.exit("sdpa_shapes: torch sees no CUDA device")
    dev = torch.device("cuda")
    n = 1 << 29
    src = torch.ones(n, dtype=torch.uint16, device=dev)
    dst = torch.empty_like(src)
    copy = 2 * 2 * n / (median_ms(lambda i: dst.copy_(src)) * 1e-3) / 1e9
    del src, dst
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, copy {copy:.0f} GB/s", flush=True)
    out = None
    if a.csv:
        fresh = not os.path.exists(a.csv)
        out = open(a.csv, "a")
        if fresh:
            out.write("gqa,T,S,sdpa_us,sdpa_gbps,copy_gbps\n")
    print(f"{'gqa':>4} {'T':>7} {'S':>4} | {'sdpa us':>9} {'GB/s':>7} {'%copy':>6}", flush=True)
    D = 128
    for gqa in a.gqa:
        for S in a.S:
            for T in a.T:
                batch, hkv = max(1, S // 8), min(8, S)
                kv_bytes = 2 * batch * hkv * T * D * 2
                copies = max(1, min(4, int(200e6 // kv_bytes) + 1))
                try:
                    ks = [torch.randn(batch, hkv, T, D, device=dev, dtype=torch.float16) for _ in range(copies)]
                    vs = [torch.randn(batch, hkv, T, D, device=dev, dtype=torch.float16) for _ in range(copies)]
                    q = torch.randn(batch, hkv * gqa, 1, D, device=dev, dtype=torch.float16)
                    ms = median_ms(lambda i: F.scaled_dot_product_attention(
                        q, ks[i % copies], vs[i % copies], enable_gqa=(gqa > 1)))
                except Exception as e:  # an SDPA backend that refuses a shape, or memory
                    print(f"{gqa:>4} {T:>7} {S:>4} | failed: {e}", flush=True)
                    continue
                byts = kv_bytes + 2 * batch * hkv * gqa * D * 2
                gbps = byts / (ms * 1e-3) / 1e9
                print(f"{gqa:>4} {T:>7} {S:>4} | {ms * 1e3:9.1f} {gbps:7.0f} {100 * gbps / copy:5.1f}%", flush=True)
                if out:
                    out.write(f"{gqa},{T},{S},{ms * 1e3:.3f},{gbps:.1f},{copy:.1f}\n")
                    out.flush()
                del ks, vs, q
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""PyTorch scaled_dot_product_attention, fp16 decode, on the shapes of
bench/bench_gpu.cu: the baseline a user would otherwise pick.

S = batch x KV heads streams of T tokens, D = 128, GQA ratio 1 or 4 (q has
S * gqa heads, one query token). Batch = S / 8, 8 KV heads. Timed with CUDA
events after warm-up, median of 25 calls, inputs rotated so that L2 does not
serve them. bytes = K + V (fp16) + q + out; % of the same copy bandwidth
measure (1 GiB device-to-device, read + write) as the C benchmark.
Usage: python3 bench/sdpa_baseline.py [--quick] [--csv FILE]"""
import sys, statistics
import torch
import torch.nn.functional as F

def median_ms(fn, reps=25, warm=3):
    for i in range(warm):
        fn(i)
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(i); b.record(); b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)

def main():
    quick = "--quick" in sys.argv
    csv = sys.argv[sys.argv.index("--csv") + 1] if "--csv" in sys.argv else None
    dev = torch.device("cuda")
    n = 1 << 29
    src = torch.ones(n, dtype=torch.uint16, device=dev); dst = torch.empty_like(src)
    copy = 2 * 2 * n / (median_ms(lambda i: dst.copy_(src)) * 1e-3) / 1e9
    del src, dst
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, copy {copy:.0f} GB/s")
    Ts = [4096, 32768] if quick else [1024, 4096, 16384, 32768, 131072]
    Ss = [64] if quick else [8, 64, 256]
    rows = []
    print(f"{'gqa':>4} {'T':>7} {'S':>4} | {'sdpa us':>9} {'GB/s':>7} {'%copy':>6}")
    for gqa in (1, 4):
        for S in Ss:
            for T in Ts:
                if S * T * 512 > 24e9:
                    continue
                batch, hkv = max(1, S // 8), min(8, S)
                D = 128
                kv_bytes = 2 * S * T * D * 2
                copies = max(1, min(4, int(200e6 // kv_bytes) + 1))
                ks = [torch.randn(batch, hkv, T, D, device=dev, dtype=torch.float16) for _ in range(copies)]
                vs = [torch.randn(batch, hkv, T, D, device=dev, dtype=torch.float16) for _ in range(copies)]
                q = torch.randn(batch, hkv * gqa, 1, D, device=dev, dtype=torch.float16)
                def call(i):
                    return F.scaled_dot_product_attention(q, ks[i % copies], vs[i % copies],
                                                          enable_gqa=(gqa > 1))
                try:
                    ms = median_ms(call)
                except Exception as e:  # an SDPA backend that refuses a shape
                    print(f"{gqa:>4} {T:>7} {S:>4} | failed: {e}")
                    continue
                byts = kv_bytes + 2 * batch * hkv * gqa * D * 2
                gbps = byts / (ms * 1e-3) / 1e9
                print(f"{gqa:>4} {T:>7} {S:>4} | {ms*1e3:9.1f} {gbps:7.0f} {100*gbps/copy:5.1f}%")
                rows.append((gqa, T, S, ms * 1e3, gbps, copy))
                del ks, vs
                torch.cuda.empty_cache()
    if csv:
        with open(csv, "w") as f:
            f.write("gqa,T,S,sdpa_us,sdpa_gbps,copy_gbps\n")
            for r in rows:
                f.write(",".join(f"{x:.3f}" if isinstance(x, float) else str(x) for x in r) + "\n")

if __name__ == "__main__":
    main()

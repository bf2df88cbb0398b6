/* tests/emu/watch_warp.cu - one KIVI-2 cache attended by kvq_cuda.cu's
   kernel on the CPU emulator, next to kvq.h's answer (walkthrough 9b).

     make emu-build
     build/emu/watch_warp                      the result, checked
     KVQ_EMU_TRACE=0,0 build/emu/watch_warp    and every exchange warp 0 of
                                               block 0 makes, with values

   A KIVI-2 cache of 100 tokens (D = 64, G = 32, window R = 32): keys
   quantized in three pages, values per token for the first 68, the rest
   full precision. The kernel takes its fast path (32-token tiles staged
   by cp.async) where both sides are quantized and its slow path for the
   rest, one query head. The output row must match kvq_attend (ONLINE)
   within 1e-5 relative L2.                                              */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#define KVQ_CUDA_DECLARE_ONLY
#include "kvq_cuda.cu"

#include <vector>

#define CU(call) do { if ((call) != cudaSuccess) { printf("%s failed\n", #call); return 1; } } while (0)
#define KQ(call) do { if ((call) != KVQ_OK) { printf("%s failed: %s\n", #call, kvq_cuda_why()); return 1; } } while (0)

template <class T> static T *to_device(const T *h, size_t n)
{
    void *p = nullptr;
    if (cudaMalloc(&p, (n ? n : 1) * sizeof(T)) != cudaSuccess) return nullptr;
    if (n) cudaMemcpy(p, h, n * sizeof(T), cudaMemcpyHostToDevice);
    return (T *)p;
}

int main(void)
{
    const size_t D = 64, T = 100;
    kvq_config cfg = kvq_config_kivi(D, 2);
    cfg.group = 32;
    cfg.residual = 32;
    kvq_cache c;
    if (kvq_cache_init(&c, &cfg) != KVQ_OK) { printf("init: %s\n", kvq_why()); return 1; }
    std::vector<float> k(D), v(D), q(D);
    uint64_t s = 42;
    auto unit = [&] { s = s * 6364136223846793005ull + 1442695040888963407ull; return (float)(s >> 40) / 16777216.0f - 0.5f; };
    for (size_t t = 0; t < T; t++) {
        for (size_t d = 0; d < D; d++) { k[d] = 2 * unit() + (d == 5 ? 4.0f : 0.0f); v[d] = unit(); }
        if (kvq_cache_append(&c, k.data(), v.data()) != KVQ_OK) { printf("append: %s\n", kvq_why()); return 1; }
    }
    for (auto &x : q) x = unit();
    std::vector<float> want(D), got(D);
    std::vector<float> scratch(kvq_attend_scratch_floats(&c, KVQ_ATTN_ONLINE));
    if (kvq_attend(&c, q.data(), 1, want.data(), NULL, KVQ_ATTN_ONLINE, scratch.data(), scratch.size()) != KVQ_OK) {
        printf("attend: %s\n", kvq_why());
        return 1;
    }

    /* the cache as the GPU reads it: its pages, tails and fp rows         */
    kvq_cuda_export_t e;
    KQ(kvq_cuda_export(&c, &e));
    printf("cache: %u tokens with quantized keys, %u with quantized values, %u full-precision rows\n",
           e.n_kq, e.n_vq, e.n_fp);
    std::vector<int32_t> pages(e.n_pages);
    for (size_t p = 0; p < e.n_pages; p++) pages[p] = (int32_t)p;
    const size_t n_slots = e.n_kq > e.n_vq ? e.n_kq : e.n_vq;
    kvq_cuda_pool pool;
    memset(&pool, 0, sizeof pool);
    pool.k_words = to_device(e.k_words, e.n_pages * kvq_cuda__kw_stride((int)D, e.group, e.bits));
    pool.k_sz = to_device(e.k_sz, e.n_pages * D);
    pool.v_words = to_device(e.v_words, e.n_pages * kvq_cuda__vw_stride((int)D, e.group, e.bits));
    pool.v_sz = to_device(e.v_sz, e.n_pages * kvq_cuda__vs_stride((int)D, e.group, e.value_group));
    pool.n_pages = e.n_pages;
    pool.head_dim = (int)D; pool.group = e.group; pool.value_group = e.value_group;
    pool.bits = e.bits; pool.zero_mode = e.zero_mode;
    kvq_cuda_stream st;
    memset(&st, 0, sizeof st);
    st.pages = to_device(pages.data(), pages.size());
    st.dead = to_device(e.dead, n_slots / 32 + 1);
    st.k_tail = to_device(e.k_tail, (n_slots - e.n_kq) * D);
    st.v_tail = to_device(e.v_tail, (n_slots - e.n_vq) * D);
    st.k_fp = to_device(e.k_fp, (size_t)e.n_fp * D);
    st.v_fp = to_device(e.v_fp, (size_t)e.n_fp * D);
    st.n_kq = e.n_kq; st.n_vq = e.n_vq; st.n_fp = e.n_fp;
    kvq_cuda_stream *d_st = to_device(&st, 1);
    int n_splits;
    const size_t wf = kvq_cuda_attend_workspace(1, 1, (int)D, e.group, n_slots + e.n_fp, &n_splits);
    float *d_q = to_device(q.data(), D), *d_out = to_device(got.data(), D);
    float *d_work = to_device(std::vector<float>(wf).data(), wf);
    int *d_status = to_device(std::vector<int>(1).data(), 1);
    KQ(kvq_cuda_attend(&pool, (int)D, d_st, 1, 1, n_slots + e.n_fp, d_q, d_out, d_work, wf,
                       d_status, 0));
    const int status = (int)kvq_cuda_status(d_status, 0);
    CU(cudaMemcpy(got.data(), d_out, D * sizeof(float), cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t d = 0; d < D; d++) { num += (got[d] - want[d]) * (got[d] - want[d]); den += want[d] * want[d]; }
    const double rel = sqrt(num / den);
    printf("out[0..3]  kvq_cuda_attend %+.6f %+.6f %+.6f %+.6f\n", got[0], got[1], got[2], got[3]);
    printf("           kvq_attend      %+.6f %+.6f %+.6f %+.6f\n", want[0], want[1], want[2], want[3]);
    printf("relative L2 error %.2e (tolerance 1e-5), status %d, %d split%s: %s\n", rel, status,
           n_splits, n_splits == 1 ? "" : "s", rel <= 1e-5 && status == 0 ? "PASS" : "FAIL");
    kvq_cuda_export_free(&e);
    kvq_cache_free(&c);
    return rel <= 1e-5 && status == 0 ? 0 : 1;
}

/* bench/sass_probe.cu - what the fused kernel's inner step costs in SASS,
   from the compiler alone (no GPU): one loop iteration = one packed word
   through kvq_dev_word_fma, the shared step of the key and value sides of
   the fast path (kvq_cuda.cu Sec. 4). Build and count with

     bench/sass_probe.sh            (needs nvcc, cuobjdump and nvdisasm)

   The count includes the loop's own loads and index arithmetic (about 10
   instructions); the rest is per word: 32/B codes, each a shift, a LOP3
   and one FFMA per query head, plus the group's affine map.             */
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "kvq_cuda.cu"

template <int B, int NH>
__global__ void sass_probe(const uint32_t *w /* (n) */, const kvq_sz *z /* (n) */,
                           const float *q /* (NH) */, float *out /* (32) */, int n)
{
    float acc[NH][32 / B], cst[NH], weight[NH];
    for (int h = 0; h < NH; h++) {
        cst[h] = 0.0f;
        weight[h] = q[h];
        for (int i = 0; i < 32 / B; i++) acc[h][i] = 0.0f;
    }
#pragma unroll 1
    for (int i = threadIdx.x; i < n; i += 32)
        kvq_dev_word_fma<B, NH>(w[i], z[i], KVQ_ZERO_FLOAT, weight, acc, cst);
    float s = 0.0f;
    for (int h = 0; h < NH; h++) {
        s += cst[h];
        for (int i = 0; i < 32 / B; i++) s += acc[h][i];
    }
    out[threadIdx.x] = s;
}
template __global__ void sass_probe<2, 1>(const uint32_t *, const kvq_sz *, const float *, float *, int);
template __global__ void sass_probe<2, 4>(const uint32_t *, const kvq_sz *, const float *, float *, int);
template __global__ void sass_probe<4, 1>(const uint32_t *, const kvq_sz *, const float *, float *, int);
template __global__ void sass_probe<4, 4>(const uint32_t *, const kvq_sz *, const float *, float *, int);

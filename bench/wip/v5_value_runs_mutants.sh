cd /work/main
/tmp/c8mut/run.sh mma-valc-no-flush-before-rescale \
  '        if constexpr (PC && !FRESH) kvq_mma_value_flush<D, B, NQ, HILO, true>(vc, st);' \
  '        if constexpr (PC && !FRESH) {}'
/tmp/c8mut/run.sh mma-valc-flush-keeps-c \
  '        if constexpr (PC && !FRESH) kvq_mma_value_flush<D, B, NQ, HILO, true>(vc, st);' \
  '        if constexpr (PC && !FRESH) kvq_mma_value_flush<D, B, NQ, HILO, false>(vc, st);'
/tmp/c8mut/run.sh mma-valc-no-exponent-switch \
  '        if (__any_sync(0xffffffffu, amax >= a_lim)) too_big(amax);' \
  '        if (false) too_big(amax);'
/tmp/c8mut/run.sh mma-valc-switch-without-flush \
  '            kvq_mma_value_flush<D, B, NQ, HILO, true>(vc, st);
#pragma unroll
            for (int k = 1; k < 32; k <<= 1) amax' \
  '#pragma unroll
            for (int k = 1; k < 32; k <<= 1) amax'
/tmp/c8mut/run.sh mma-valc-run-of-8 \
  '    const int run_mask = wk.log2_cpp < 2 ? (1 << wk.log2_cpp) - 1 : 3;    /* kvq_mma_run_chunk */' \
  '    const int run_mask = 1023;'

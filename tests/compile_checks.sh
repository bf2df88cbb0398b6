#!/bin/sh
# Compile kvq.h the ways a user will: strict C99 with gcc and clang, as C++,
# KVQ_STATIC in two translation units linked together, kvq_simd.h for each
# vector ISA, and the README snippet; and check that kvq.h stays plain C.
# A link that calls real symbols catches a misspelled KVQ_IMPLEMENTATION.
set -e
case "$(uname -m)" in x86_64|amd64|i?86) X86=1 ;; *) X86= ;; esac
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
cat > "$t/impl.c" <<'C'
#define KVQ_IMPLEMENTATION
#include "kvq.h"
int impl_uses(void) { return kvq_f32_to_f16(1.0f) == 0x3C00 ? 0 : 1; }
C
cat > "$t/user.c" <<'C'
#include "kvq.h"
int impl_uses(void);
int main(void) { return impl_uses() + (kvq_packed_words(16, 2) == 1 ? 0 : 1); }
C
cat > "$t/static1.c" <<'C'
#define KVQ_STATIC
#define KVQ_IMPLEMENTATION
#include "kvq.h"
int other(void);
int main(void) { return other() + (kvq_bits_supported(2) ? 0 : 1); }
C
cat > "$t/static2.c" <<'C'
#define KVQ_STATIC
#define KVQ_IMPLEMENTATION
#include "kvq.h"
int other(void) { return kvq_bits_supported(4) ? 0 : 1; }
C
# kvq_why() is per thread: a failure on another thread leaves this one's
# reason alone (C99 __thread, C11 _Thread_local, C++ thread_local)
cat > "$t/why.c" <<'C'
#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include <pthread.h>
#include <string.h>
static void *fail_elsewhere(void *arg) { (void)arg; kvq_pack(NULL, 8, 2, NULL); return NULL; }
int main(void)
{
    pthread_t th;
    char mine[200];
    kvq_layout L;
    if (kvq_layout_init(&L, 0, 0, 2, 1, KVQ_PER_TOKEN) == KVQ_OK) return 1;
    strcpy(mine, kvq_why());
    if (pthread_create(&th, NULL, fail_elsewhere, NULL) != 0) return 1;
    pthread_join(th, NULL);
    return strcmp(mine, kvq_why()) != 0 || strstr(mine, "kvq_layout_init") == NULL;
}
C
why=0
for cc in "gcc -std=c99" "gcc -std=c11" "clang -std=c99" "g++ -x c++ -std=c++11"; do
    bin=${cc%% *}
    command -v "$bin" >/dev/null 2>&1 || continue
    $cc -Wall -Wextra -Wpedantic -Werror -pthread -I. "$t/why.c" -o "$t/why" -lm
    "$t/why" || { echo "compile checks: kvq_why() is not per thread with $cc"; exit 1; }
    why=$((why + 1))
done
echo "compile checks: kvq_why() per thread with $why compilers"
ok=0; skip=""
for cc in "gcc -std=c99" "clang -std=c99" "g++ -x c++ -std=c++11" "clang++ -x c++ -std=c++17"; do
    bin=${cc%% *}
    if ! command -v "$bin" >/dev/null 2>&1; then skip="$skip $bin"; continue; fi
    $cc -Wall -Wextra -Wpedantic -Werror -I. -c "$t/impl.c" -o "$t/impl.o"
    $cc -Wall -Wextra -Wpedantic -Werror -I. -c "$t/user.c" -o "$t/user.o"
    $bin -o "$t/a" "$t/impl.o" "$t/user.o" -lm; "$t/a"
    $cc -Wall -Wextra -Werror -I. -c "$t/static1.c" -o "$t/s1.o"
    $cc -Wall -Wextra -Werror -I. -c "$t/static2.c" -o "$t/s2.o"
    $bin -o "$t/s" "$t/s1.o" "$t/s2.o" -lm; "$t/s"
    ok=$((ok + 1))
done
# kvq_simd.h: the same drop-in, with the fast paths, for each vector ISA
# this compiler can target (compiled only: the CPU may lack the ISA; the
# bits are tests/simd_check.c's), and with none (it must then add nothing)
cat > "$t/simd_impl.c" <<'C'
#define KVQ_IMPLEMENTATION
#include "kvq_simd.h"
int impl_uses(void) { return kvq_f32_to_f16(1.0f) == 0x3C00 ? 0 : 1; }
C
cat > "$t/simd_user.c" <<'C'
#include "kvq_simd.h"
int impl_uses(void);
int main(void) { return impl_uses() + (kvq_packed_words(16, 2) == 1 ? 0 : 1); }
C
simd=0
# (gcc every build; the other compilers one vector ISA each, for cost)
for build in "gcc -std=c99|" "gcc -std=c99|-mavx2 -mfma -mf16c" "gcc -std=c99|-mavx2" \
             "gcc -std=c99|-march=x86-64-v4" "clang -std=c99|-mavx2 -mfma -mf16c" \
             "g++ -x c++ -std=c++11|-march=x86-64-v4" "clang++ -x c++ -std=c++17|-mavx2 -mfma -mf16c"; do
    cc=${build%%|*} isa=${build#*|}
    bin=${cc%% *}
    command -v "$bin" >/dev/null 2>&1 || continue
    case "$isa" in -m*) [ -n "$X86" ] || continue ;; esac
    $cc -Wall -Wextra -Wpedantic -Werror $isa -I. -c "$t/simd_impl.c" -o "$t/si.o"
    $cc -Wall -Wextra -Wpedantic -Werror $isa -I. -c "$t/simd_user.c" -o "$t/su.o"
    $bin -o "$t/sa" "$t/si.o" "$t/su.o" -lm
    if [ -z "$isa" ]; then "$t/sa"; fi
    simd=$((simd + 1))
done
echo "compile checks: kvq_simd.h clean in $simd compiler and ISA builds"
# kvq.h is the definition in plain C: no intrinsic, vector type, prefetch,
# or ISA / CPU-model macro (those belong in kvq_simd.h)
if grep -nE '_mm[0-9]*_|__m(64|128|256|512)|vector_size|__builtin_prefetch|immintrin|arm_neon|__(AVX|SSE|F16C|FMA|ARM_NEON|aarch64|x86_64|znver|tune_)[A-Za-z0-9_]*__|KVQ__W\b' kvq.h; then
    echo "compile checks: kvq.h must stay plain C (the lines above belong in kvq_simd.h)"; exit 1
fi
echo "compile checks: kvq.h is plain C (no intrinsics, vector types, prefetch or ISA macros)"
# the README's drop-in snippet, extracted between the markers
if [ -f README.md ] && grep -q 'snippet:begin' README.md; then
    sed -n '/snippet:begin/,/snippet:end/p' README.md | sed '1,2d;$d' | sed '$d' > "$t/snippet.c"
    gcc -std=c99 -Wall -Wextra -Wpedantic -Werror -I. "$t/snippet.c" -o "$t/snippet" -lm
    "$t/snippet" > /dev/null
    echo "compile checks: README snippet builds and runs"
fi
echo "compile checks: kvq.h clean with $ok compilers${skip:+ (not installed:$skip)}"

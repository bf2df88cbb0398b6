#!/bin/sh
# Compile kvq.h the ways a user will: strict C99 with gcc and clang, as C++,
# KVQ_STATIC in two translation units linked together, and the README snippet.
# A link that calls real symbols catches a misspelled KVQ_IMPLEMENTATION.
set -e
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
# the README's drop-in snippet, extracted between the markers
if [ -f README.md ] && grep -q 'snippet:begin' README.md; then
    sed -n '/snippet:begin/,/snippet:end/p' README.md | sed '1,2d;$d' | sed '$d' > "$t/snippet.c"
    gcc -std=c99 -Wall -Wextra -Wpedantic -Werror -I. "$t/snippet.c" -o "$t/snippet" -lm
    "$t/snippet" > /dev/null
    echo "compile checks: README snippet builds and runs"
fi
echo "compile checks: kvq.h clean with $ok compilers${skip:+ (not installed:$skip)}"

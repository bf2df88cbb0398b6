/* tests/emu/kvq_emu.cpp - the emulator's runtime (kvq_emu.h says what it
   models). Sections:
     1. fp16 arithmetic
     2. fibers: an x86-64 switch in 14 instructions, ucontext elsewhere
     3. blocks, threads and the scheduler
     4. exchanges: barriers, shuffles, mma.sync
     5. shared memory and cp.async
     6. the race check (the __tsan_* hooks)
     7. the host API; 7.1 streams and events (created streams defer)     */
#include "kvq_emu.h"
#include "mma_model.h"

#include <stdarg.h>
#include <vector>
#include <map>
#include <string>
#include <algorithm>
#include <chrono>
#include <sys/mman.h>
#include <unistd.h>
#include <link.h>

#if defined(__SANITIZE_ADDRESS__)
#define KVQ_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVQ_EMU_ASAN 1
#endif
#endif
#ifdef KVQ_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

kvq_emu_ids_t kvq_emu_ids;

namespace kvq_emu {

/* Everything the emulator finds wrong in a kernel is fatal: say it, stop. */
[[noreturn]] static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(stdout);
    fputs("kvq_emu: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    _exit(86);
}

/* ======================================================================== */
/* 1. fp16                                                                  */
/* ======================================================================== */
/* fp16 <-> double and the MMA's accumulation models live in mma_model.h,
   shared with bench/mma_selftest.cu (the same models, checked against a
   GPU's tensor cores there).                                              */
unsigned short f64_to_f16(double x) { return kvq_mma_model::f64_to_f16(x); }
double f16_to_f64(unsigned short h) { return kvq_mma_model::f16_to_f64(h); }
/* a b + c with one rounding: a b is exact in double (22 bits); the sum is
   rounded to odd (an inexact result keeps an odd last bit), which then
   rounds correctly to the 11 bits of fp16.                                */
unsigned short f16_fma(unsigned short a, unsigned short b, unsigned short c)
{
    const double p = f16_to_f64(a) * f16_to_f64(b), q = f16_to_f64(c);
    double s = p + q;
    if (isfinite(s)) {
        const double bb = s - p, err = (p - (s - bb)) + (q - bb);   /* TwoSum */
        uint64_t bits;
        memcpy(&bits, &s, 8);
        if (err != 0.0 && !(bits & 1)) s = nextafter(s, err > 0 ? INFINITY : -INFINITY);
    }
    return f64_to_f16(s);
}

/* ======================================================================== */
/* 2. fibers                                                                */
/* ======================================================================== */
#if defined(__x86_64__)
/* switch_to(save, to): push the callee-saved registers, store the stack
   pointer in *save, load `to`, pop and return into the other fiber.     */
extern "C" void kvq_emu_switch(void **save, void *to);
asm(".text\n"
    ".globl kvq_emu_switch\n"
    ".type kvq_emu_switch,@function\n"
    "kvq_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size kvq_emu_switch, .-kvq_emu_switch\n");
struct context { void *sp = nullptr; };
#else
struct context { ucontext_t uc; };
#endif

static size_t stack_bytes(void)
{
    static size_t n = 0;
    if (!n) {
        const char *e = getenv("KVQ_EMU_STACK_KB");
        n = (e && atoi(e) >= 16 ? (size_t)atoi(e) : 64) * 1024;
    }
    return n;
}

/* ======================================================================== */
/* 3. blocks, threads, the scheduler                                        */
/* ======================================================================== */
enum { RUNNING, WAITING, DONE };
enum { EX_BARRIER, EX_SYNCWARP, EX_SHFL, EX_MMA, EX_IMMA };
static const char *ex_name[] = { "__syncthreads", "__syncwarp", "__shfl_sync", "mma.sync",
                                 "mma.sync (u8)" };

struct copy_t { void *dst; const void *src; int bytes; unsigned group; const char *file; int line; };

struct mma_lane { float *c; int32_t *ci; uint32_t a[4], b[2]; bool b_signed; };

struct thread_t {
    context ctx;
    char *stack = nullptr;          /* stack_bytes() + one guard page       */
    unsigned tid = 0, warp = 0, lane = 0;
    uint3 idx = { 0, 0, 0 };
    int state = DONE;
    /* the exchange this thread waits in                                   */
    int kind = 0;
    unsigned mask = 0;
    const char *file = nullptr;
    int line = 0;
    const char *func = "";
    uint64_t value = 0;             /* shuffle: sent, then received         */
    int arg = 0, width = 32, xor_mode = 0;
    mma_lane mma;
    /* cp.async: copies in flight, groups committed so far                 */
    std::vector<copy_t> copies;
    unsigned committed = 0;
#ifdef KVQ_EMU_ASAN
    void *fake_stack = nullptr;
#endif
};

/* flight: per byte, whether a cp.async into it is in flight (made at the
   array's first cp.async, freed with the array)                          */
struct shared_array {
    const void *tag; unsigned char *p; size_t bytes; const char *name;
    unsigned char *flight = nullptr;
};

struct block_t {
    const launch_desc *launch = nullptr;
    uint3 idx = { 0, 0, 0 };
    unsigned n_threads = 0;
    std::vector<thread_t> *threads = nullptr;
    unsigned barriers = 0;                  /* __syncthreads completed      */
    std::vector<unsigned> warp_syncs;       /* warp exchanges completed      */
    std::vector<shared_array> shared;       /* static arrays, then dynamic  */
    unsigned char *dynamic = nullptr;
    size_t shared_bytes = 0;
};

static std::vector<thread_t> g_threads;     /* reused from launch to launch */
static block_t *g_block = nullptr;
static thread_t *g_cur = nullptr;           /* the running CUDA thread      */
static context g_sched;                     /* the scheduler's own context   */
static uint64_t g_rng = 0;                  /* KVQ_EMU_SEED: 0 = thread order */
static int g_sms = 132;
static int g_trace_block = -1, g_trace_warp = -1;
static size_t g_block_serial = 0;
static kvq_mma_model::model g_mma = kvq_mma_model::of(kvq_mma_model::EXACT);
static bool g_keep_subnormals = true;
static void race_reset(void);
static void banks_flush(unsigned warp);       /* the bank-conflict model (Sec. 6) */
static void banks_flush_all(void);

static void read_options(void)
{
    static bool done = false;
    if (done) return;
    done = true;
    const char *e;
    if ((e = getenv("KVQ_EMU_SEED")) && atoll(e) > 0) g_rng = (uint64_t)atoll(e);
    if ((e = getenv("KVQ_EMU_SMS")) && atoi(e) > 0) g_sms = atoi(e);
    if ((e = getenv("KVQ_EMU_MMA")) && !kvq_mma_model::parse(e, &g_mma))
        fail("KVQ_EMU_MMA=%s: use exact, trunc or align:N:F:rz|rn[:sep][:esum] (tests/emu/mma_model.h)", e);
    if ((e = getenv("KVQ_EMU_SUBNORMAL"))) {
        if (!strcmp(e, "flush")) g_keep_subnormals = false;
        else if (strcmp(e, "keep")) fail("KVQ_EMU_SUBNORMAL=%s: use keep or flush", e);
    }
    if ((e = getenv("KVQ_EMU_TRACE")) && sscanf(e, "%d,%d", &g_trace_block, &g_trace_warp) != 2)
        fail("KVQ_EMU_TRACE=%s: use BLOCK,WARP (linear block index, warp index)", e);
}
void set_mma_model(mma_model model, bool keep_subnormals)
{
    read_options();
    g_mma = kvq_mma_model::of(model == MMA_TRUNC ? kvq_mma_model::TRUNC : kvq_mma_model::EXACT);
    g_keep_subnormals = keep_subnormals;
}

static uint64_t rng_next(void)                     /* splitmix64            */
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}
static std::string symbolize(const void *pc);
/* The kernel's name: the launch's text, or, when that is a variable (a
   kernel chosen through a function pointer), the symbol at its address.  */
static std::string kernel_name(const launch_desc &d)
{
    if (strchr(d.name, '_') || strchr(d.name, '<')) return d.name;
    std::string s = symbolize((const char *)d.fn + 1);
    const size_t open = s.find(" (");
    if (open != std::string::npos && s.size() > open + 3) s = s.substr(open + 2, s.size() - open - 3);
    return s;
}
static std::string where(const thread_t &t)
{
    char b[400];
    snprintf(b, sizeof b, "thread %u (warp %u lane %u) of block (%u,%u,%u) of %s", t.tid,
             t.warp, t.lane, g_block->idx.x, g_block->idx.y, g_block->idx.z,
             kernel_name(*g_block->launch).c_str());
    return b;
}
static std::string site_of(const thread_t &t)
{
    char b[200];
    if (t.state == DONE) return "has exited";
    snprintf(b, sizeof b, "waits at %s, %s:%d", ex_name[t.kind], base_name(t.file), t.line);
    return b;
}

static void set_ids(const thread_t &t)
{
    kvq_emu_ids.thread_idx = t.idx;
    kvq_emu_ids.block_idx = g_block->idx;
    kvq_emu_ids.block_dim = g_block->launch->block;
    kvq_emu_ids.grid_dim = g_block->launch->grid;
}

/* Leave the running fiber for the scheduler; returns when it is resumed. */
static void yield_to_scheduler(thread_t *t, bool finished)
{
#ifdef KVQ_EMU_ASAN
    __sanitizer_start_switch_fiber(finished ? nullptr : &t->fake_stack, nullptr, 0);
#else
    (void)finished;
#endif
#if defined(__x86_64__)
    kvq_emu_switch(&t->ctx.sp, g_sched.sp);
#else
    swapcontext(&t->ctx.uc, &g_sched.uc);
#endif
#ifdef KVQ_EMU_ASAN
    __sanitizer_finish_switch_fiber(t->fake_stack, nullptr, nullptr);
#endif
}

static void thread_finished(thread_t *t);

static void fiber_main(void)
{
    thread_t *t = g_cur;
#ifdef KVQ_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    g_block->launch->run_thread(g_block->launch->ctx);
    thread_finished(t);
    yield_to_scheduler(t, true);
    fail("a finished thread was resumed");
}

static void start_fiber(thread_t &t)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), n = stack_bytes();
    if (!t.stack) {
        void *m = mmap(nullptr, n + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) fail("cannot map a %zu-byte fiber stack", n + page);
        mprotect(m, page, PROT_NONE);                 /* the guard page         */
        t.stack = (char *)m + page;
    }
#ifdef KVQ_EMU_ASAN
    /* frames of the stack's previous fiber never returned: clear their
       redzones before a new fiber runs on it                              */
    __asan_unpoison_memory_region(t.stack, n);
#endif
#if defined(__x86_64__)
    uintptr_t top = ((uintptr_t)t.stack + n) & ~(uintptr_t)15;
    void **sp = (void **)(top - 16);                  /* 16-aligned ret slot   */
    *sp = (void *)fiber_main;                         /* ret -> fiber_main     */
    sp -= 6;                                          /* rbp rbx r12-r15 = 0   */
    for (int i = 0; i < 6; i++) sp[i] = nullptr;
    t.ctx.sp = sp;
#else
    getcontext(&t.ctx.uc);
    t.ctx.uc.uc_stack.ss_sp = t.stack;
    t.ctx.uc.uc_stack.ss_size = n;
    t.ctx.uc.uc_link = nullptr;
    makecontext(&t.ctx.uc, fiber_main, 0);
#endif
}

static void resume(thread_t *t)
{
    g_cur = t;
    set_ids(*t);
#ifdef KVQ_EMU_ASAN
    void *save = nullptr;
    __sanitizer_start_switch_fiber(&save, t->stack, stack_bytes());
#endif
#if defined(__x86_64__)
    kvq_emu_switch(&g_sched.sp, t->ctx.sp);
#else
    swapcontext(&g_sched.uc, &t->ctx.uc);
#endif
#ifdef KVQ_EMU_ASAN
    __sanitizer_finish_switch_fiber(save, nullptr, nullptr);
#endif
    g_cur = nullptr;
}

static void deadlock(void)
{
    std::vector<thread_t> &T = *g_block->threads;
    fprintf(stderr, "kvq_emu: no thread of block (%u,%u,%u) of %s can run:\n", g_block->idx.x,
            g_block->idx.y, g_block->idx.z, kernel_name(*g_block->launch).c_str());
    /* one line per run of consecutive threads in the same place          */
    for (unsigned i = 0; i < g_block->n_threads;) {
        unsigned j = i + 1;
        const std::string s = site_of(T[i]);
        while (j < g_block->n_threads && site_of(T[j]) == s) j++;
        fprintf(stderr, "  threads %u-%u %s\n", i, j - 1, s.c_str());
        i = j;
    }
    fail("deadlock (a lane missing from an exchange, or threads at different barriers)");
}

static void run_block(block_t &b)
{
    std::vector<thread_t> &T = *b.threads;
    for (unsigned i = 0; i < b.n_threads; i++) {
        thread_t &t = T[i];
        const dim3 bd = b.launch->block;
        t.tid = i;
        t.warp = i / 32;
        t.lane = i % 32;
        t.idx = { i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y) };
        t.state = RUNNING;
        t.copies.clear();
        t.committed = 0;
        start_fiber(t);
    }
    unsigned next = 0;
    for (;;) {
        thread_t *pick = nullptr;
        if (g_rng) {
            unsigned n_run = 0;
            for (unsigned i = 0; i < b.n_threads; i++) n_run += T[i].state == RUNNING;
            if (n_run) {
                unsigned k = (unsigned)(rng_next() % n_run);
                for (unsigned i = 0; i < b.n_threads; i++)
                    if (T[i].state == RUNNING && k-- == 0) { pick = &T[i]; break; }
            }
        } else {
            for (unsigned n = 0; n < b.n_threads && !pick; n++) {
                thread_t &t = T[(next + n) % b.n_threads];
                if (t.state == RUNNING) pick = &t;
            }
        }
        if (!pick) {
            for (unsigned i = 0; i < b.n_threads; i++)
                if (T[i].state != DONE) deadlock();
            return;
        }
        next = pick->tid + 1;
        resume(pick);
    }
}

/* ======================================================================== */
/* 4. exchanges                                                             */
/* ======================================================================== */
/* "void kvq_dev_transpose<N, ...>::run(float (&)[N], int) [with ...]" ->
   "kvq_dev_transpose::run": the qualified name, without return type,
   template arguments or parameters.                                     */
static std::string short_name(const char *pretty)
{
    std::string name;
    int depth = 0;
    for (const char *p = pretty; *p; p++) {
        if (*p == '<') depth++;
        else if (*p == '>') depth--;
        else if (depth == 0 && *p == '(') break;
        else if (depth == 0 && *p == ' ') name.clear();   /* past the return type */
        else if (depth == 0) name += *p;
    }
    return name;
}

static bool tracing(const thread_t &t)
{
    return g_trace_block >= 0 && (size_t)g_trace_block == g_block_serial &&
           (int)t.warp == g_trace_warp;
}

/* The PTX ISA's mma.m16n8k16 fragments (.row A, .col B, f32 C/D), for lane
   l with group g = l / 4 and thread-in-group t = l % 4:
     A (16x16 f16, 4 registers, halves i = 0..7): row g + 8 ((i / 2) % 2),
       column 2 t + (i % 2) + 8 (i / 4)
     B (16x8 f16, 2 registers, halves i = 0..3): row 2 t + (i % 2) + 8 (i / 2),
       column g
     C, D (16x8 f32, i = 0..3): row g + 8 (i / 2), column 2 t + (i % 2)  */
static void frag_a(int l, int i, int *r, int *c) { *r = l / 4 + 8 * ((i / 2) % 2); *c = 2 * (l % 4) + i % 2 + 8 * (i / 4); }
static void frag_b(int l, int i, int *r, int *c) { *r = 2 * (l % 4) + i % 2 + 8 * (i / 2); *c = l / 4; }
static void frag_c(int l, int i, int *r, int *c) { *r = l / 4 + 8 * (i / 2); *c = 2 * (l % 4) + i % 2; }
/* mma.m16n8k32 with .u8 A and .u8/.s8 B (s32 C/D, the C table above):
     A (16x32 bytes, 4 registers, bytes i = 0..15): row g + 8 ((i / 4) % 2),
       column 4 t + (i % 4) + 16 (i / 8)
     B (32x8 bytes, 2 registers, bytes i = 0..7): row 4 t + (i % 4) + 16 (i / 4),
       column g
   Integer products and sums are exact; the s32 result wraps (no .satfinite). */
static void frag_a8(int l, int i, int *r, int *c) { *r = l / 4 + 8 * ((i / 4) % 2); *c = 4 * (l % 4) + i % 4 + 16 * (i / 8); }
static void frag_b8(int l, int i, int *r, int *c) { *r = 4 * (l % 4) + i % 4 + 16 * (i / 4); *c = l / 4; }

void mma_reference(const unsigned short *A, const unsigned short *B, const float *C, float *D)
{
    read_options();
    kvq_mma_model::mma(A, B, C, D, g_mma, g_keep_subnormals);
}

/* All lanes of `mask` have arrived at the same exchange: do it.           */
static void complete_warp(thread_t *T, unsigned mask, int kind)
{
    if (kind == EX_SHFL) {
        uint64_t sent[32];
        for (int l = 0; l < 32; l++)
            if (mask >> l & 1) sent[l] = T[l].value;
        for (int l = 0; l < 32; l++) {
            if (!(mask >> l & 1)) continue;
            thread_t &t = T[l];
            const int w = t.width, seg = l & ~(w - 1);
            /* CUDA: within groups of `width` lanes; an xor that lands in a
               later group returns the lane's own value, an earlier one is
               read                                                        */
            int src = t.xor_mode ? (l ^ t.arg) : seg + (t.arg & (w - 1));
            if (t.xor_mode && src >= seg + w) src = l;
            if (!(mask >> src & 1))
                fail("%s reads lane %d in a shuffle at %s:%d, which its mask 0x%08x leaves out",
                     where(t).c_str(), src, base_name(t.file), t.line, mask);
            t.value = sent[src];
        }
    } else if (kind == EX_MMA) {
        unsigned short A[256], B[128];
        float C[128], D[128];
        for (int l = 0; l < 32; l++) {
            const mma_lane &m = T[l].mma;
            for (int i = 0; i < 8; i++) {
                int r, c;
                frag_a(l, i, &r, &c);
                A[r * 16 + c] = (unsigned short)(m.a[i / 2] >> (16 * (i % 2)));
            }
            for (int i = 0; i < 4; i++) {
                int r, c;
                frag_b(l, i, &r, &c);
                B[r * 8 + c] = (unsigned short)(m.b[i / 2] >> (16 * (i % 2)));
            }
            for (int i = 0; i < 4; i++) {
                int r, c;
                frag_c(l, i, &r, &c);
                C[r * 8 + c] = m.c[i];
            }
        }
        mma_reference(A, B, C, D);
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < 4; i++) {
                int r, c;
                frag_c(l, i, &r, &c);
                T[l].mma.c[i] = D[r * 8 + c];
            }
    } else if (kind == EX_IMMA) {
        int A[16 * 32], B[32 * 8];
        int64_t C[16 * 8];
        const bool b_signed = T[0].mma.b_signed;
        for (int l = 0; l < 32; l++) {
            const mma_lane &m = T[l].mma;
            if (m.b_signed != b_signed) fail("mma.sync (u8): lanes disagree on B's type");
            for (int i = 0; i < 16; i++) {
                int r, c;
                frag_a8(l, i, &r, &c);
                A[r * 32 + c] = (int)(m.a[i / 4] >> (8 * (i % 4)) & 0xFFu);
            }
            for (int i = 0; i < 8; i++) {
                int r, c;
                frag_b8(l, i, &r, &c);
                const int byte = (int)(m.b[i / 4] >> (8 * (i % 4)) & 0xFFu);
                B[r * 8 + c] = b_signed && byte >= 128 ? byte - 256 : byte;
            }
            for (int i = 0; i < 4; i++) {
                int r, c;
                frag_c(l, i, &r, &c);
                C[r * 8 + c] = m.ci[i];
            }
        }
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 8; c++)
                for (int k = 0; k < 32; k++) C[r * 8 + c] += (int64_t)A[r * 32 + k] * B[k * 8 + c];
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < 4; i++) {
                int r, c;
                frag_c(l, i, &r, &c);
                T[l].mma.ci[i] = (int32_t)(uint32_t)(uint64_t)C[r * 8 + c];   /* wraps */
            }
    }
    if (tracing(T[__builtin_ctz(mask)])) {
        const thread_t &t = T[__builtin_ctz(mask)];
        printf("[emu] block %zu warp %u %s in %s, mask %08x", g_block_serial, t.warp,
               ex_name[kind], short_name(t.func).c_str(), mask);   /* after the exchange */
        if (kind == EX_SHFL) {          /* what lanes 0-3 received, as floats */
            printf(" %s %d, lanes 0-3 get", t.xor_mode ? "xor" : "src", t.arg);
            for (int l = 0; l < 4; l++)
                if (mask >> l & 1) {
                    float f;
                    const uint32_t u = (uint32_t)T[l].value;
                    memcpy(&f, &u, 4);
                    printf(" %.5g", f);
                }
        }
        printf("\n");
    }
    for (int l = 0; l < 32; l++)
        if (mask >> l & 1) T[l].state = RUNNING;
    g_block->warp_syncs[T[0].warp]++;
    if (mask == 0xffffffffu) banks_flush(T[0].warp);   /* the whole warp is here */
}

/* Every other lane the arriving thread's exchange names: done (reported),
   still running (wait), here (complete when all are), or waiting
   elsewhere. A lane waiting elsewhere in a warp exchange whose mask
   leaves this lane out waits for other lanes, not for this one: that
   exchange can still complete and the lane come here (disjoint masks,
   as in a warp split in halves), so it is not here yet, and only a
   block in which no thread can run is a deadlock. A lane elsewhere in an
   exchange that names this lane, or at __syncthreads, waits for this
   one while this one waits for it: divergence, reported at once.        */
static void try_warp(thread_t *me)
{
    std::vector<thread_t> &all = *g_block->threads;
    thread_t *T = &all[me->warp * 32];
    const unsigned lanes = std::min(32u, g_block->n_threads - me->warp * 32);
    if (lanes < 32 && (me->mask >> lanes))
        fail("%s: %s at %s:%d names lanes past the block's last thread (mask 0x%08x)",
             where(*me).c_str(), ex_name[me->kind], base_name(me->file), me->line, me->mask);
    if (!(me->mask >> me->lane & 1))
        fail("%s: %s at %s:%d with a mask 0x%08x that leaves out its own lane",
             where(*me).c_str(), ex_name[me->kind], base_name(me->file), me->line, me->mask);
    bool all_here = true;
    for (unsigned l = 0; l < lanes; l++) {
        if (!(me->mask >> l & 1) || &T[l] == me) continue;
        const thread_t &o = T[l];
        if (o.state == RUNNING) { all_here = false; continue; }
        const bool same = o.state != DONE && o.kind == me->kind && o.file == me->file &&
                          o.line == me->line && o.mask == me->mask;
        if (!same && o.state == WAITING && o.kind != EX_BARRIER && !(o.mask >> me->lane & 1)) {
            all_here = false;
            continue;
        }
        if (o.state == DONE || o.kind != me->kind || o.file != me->file || o.line != me->line ||
            o.mask != me->mask)
            fail("divergent %s: %s is at %s:%d (mask 0x%08x), but lane %u %s", ex_name[me->kind],
                 where(*me).c_str(), base_name(me->file), me->line, me->mask, l,
                 site_of(o).c_str());
    }
    if (all_here) complete_warp(T, me->mask, me->kind);
}

/* A barrier completes when every thread that has not exited waits at it
   (exited threads no longer count, as on the hardware since Volta).      */
static void try_barrier(void)
{
    std::vector<thread_t> &T = *g_block->threads;
    const thread_t *first = nullptr;
    for (unsigned i = 0; i < g_block->n_threads; i++) {
        const thread_t &t = T[i];
        if (t.state == DONE) continue;
        if (t.state == RUNNING || t.kind != EX_BARRIER) return;
        if (!first) first = &t;
        else if (t.file != first->file || t.line != first->line)
            fail("threads of one block at different barriers: %s at %s:%d, %s at %s:%d",
                 where(*first).c_str(), base_name(first->file), first->line, where(t).c_str(),
                 base_name(t.file), t.line);
    }
    if (!first) return;
    if (g_trace_block >= 0 && (size_t)g_trace_block == g_block_serial)
        printf("[emu] block %zu __syncthreads in %s (all %u threads)\n", g_block_serial,
               short_name(first->func).c_str(), g_block->n_threads);
    for (unsigned i = 0; i < g_block->n_threads; i++)
        if (T[i].state == WAITING) T[i].state = RUNNING;
    g_block->barriers++;
    banks_flush_all();
}

static thread_t *self(const char *what)
{
    if (!g_cur) fail("%s called outside a kernel", what);
    return g_cur;
}

static void arrive(thread_t *t, int kind, const site_t &at, unsigned mask)
{
    const char *file = at.file;
    const int line = at.line;
    t->state = WAITING;
    t->kind = kind;
    t->file = file;
    t->line = line;
    t->func = at.func;
    t->mask = mask;
    if (kind == EX_BARRIER) {
        /* a warp-mate waiting in an exchange that names this thread can
           never complete now                                              */
        std::vector<thread_t> &T = *g_block->threads;
        for (unsigned l = t->warp * 32; l < std::min(g_block->n_threads, t->warp * 32 + 32); l++)
            if (T[l].state == WAITING && T[l].kind != EX_BARRIER && (T[l].mask >> t->lane & 1))
                fail("divergent %s: lane %u %s, but %s reached __syncthreads at %s:%d",
                     ex_name[T[l].kind], T[l].lane, site_of(T[l]).c_str(), where(*t).c_str(),
                     base_name(file), line);
        try_barrier();
    } else {
        try_warp(t);
    }
    while (t->state == WAITING) yield_to_scheduler(t, false);
}

void syncthreads(const site_t &at)
{
    arrive(self("__syncthreads"), EX_BARRIER, at, 0);
}
void syncwarp(const site_t &at, unsigned mask)
{
    arrive(self("__syncwarp"), EX_SYNCWARP, at, mask);
}
uint64_t shfl(const site_t &at, unsigned mask, uint64_t value, int lane_arg, int width,
              int xor_mode)
{
    thread_t *t = self("__shfl_sync");
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail("%s: shuffle width %d at %s:%d (a power of two up to 32)", where(*t).c_str(), width,
             base_name(at.file), at.line);
    t->value = value;
    t->arg = lane_arg;
    t->width = width;
    t->xor_mode = xor_mode;
    arrive(t, EX_SHFL, at, mask);
    return t->value;
}
void mma_m16n8k16(const site_t &at, float (&c)[4], const uint32_t *a, uint32_t b0, uint32_t b1)
{
    thread_t *t = self("mma.sync");
    t->mma.c = c;
    for (int i = 0; i < 4; i++) t->mma.a[i] = a[i];
    t->mma.b[0] = b0;
    t->mma.b[1] = b1;
    arrive(t, EX_MMA, at, 0xffffffffu);    /* .aligned: the whole warp */
}
void mma_m16n8k32_u8(const site_t &at, int32_t (&c)[4], const uint32_t *a, uint32_t b0, uint32_t b1,
                     bool b_signed)
{
    thread_t *t = self("mma.sync (u8)");
    t->mma.ci = c;
    for (int i = 0; i < 4; i++) t->mma.a[i] = a[i];
    t->mma.b[0] = b0;
    t->mma.b[1] = b1;
    t->mma.b_signed = b_signed;
    arrive(t, EX_IMMA, at, 0xffffffffu);
}

static void thread_finished(thread_t *t)
{
    if (!t->copies.empty())
        fail("%s exited with %zu cp.async copies never waited for (the first issued at %s:%d)",
             where(*t).c_str(), t->copies.size(), base_name(t->copies[0].file),
             t->copies[0].line);
    t->state = DONE;
    std::vector<thread_t> &T = *g_block->threads;
    for (unsigned l = t->warp * 32; l < std::min(g_block->n_threads, t->warp * 32 + 32); l++)
        if (T[l].state == WAITING && T[l].kind != EX_BARRIER && (T[l].mask >> t->lane & 1))
            fail("lane %u %s, but %s has exited", T[l].lane, site_of(T[l]).c_str(),
                 where(*t).c_str());
    try_barrier();
}

/* ======================================================================== */
/* 5. shared memory and cp.async                                            */
/* ======================================================================== */
static unsigned char *poisoned_block(size_t bytes, size_t align)
{
    void *p = nullptr;
    if (align < sizeof(void *)) align = sizeof(void *);
    if (align < 16) align = 16;
    if (posix_memalign(&p, align, bytes ? bytes : 1)) fail("out of host memory (%zu bytes)", bytes);
    memset(p, 0xFF, bytes);
    return (unsigned char *)p;
}

void *shared_static(const void *tag, size_t bytes, size_t align, const char *name, const char *file,
                    int line)
{
    (void)self("__shared__");
    for (const shared_array &a : g_block->shared)
        if (a.tag == tag) {
            if (a.bytes != bytes) fail("shared array '%s' declared with two sizes", name);
            return a.p;
        }
    g_block->shared_bytes += bytes;
    if (g_block->shared_bytes > 227 * 1024)
        fail("block of %s: %zu bytes of shared memory (an H100 block has at most 227 KB), "
             "at '%s' %s:%d", g_block->launch->name, g_block->shared_bytes, name, base_name(file), line);
    shared_array a = { tag, poisoned_block(bytes, align), bytes, name };
    g_block->shared.push_back(a);
    return a.p;
}
void *shared_dynamic(const char *name, const char *file, int line)
{
    (void)self("extern __shared__");
    (void)name; (void)file; (void)line;
    return g_block->dynamic;
}

static const shared_array *shared_at(const void *p, size_t bytes)
{
    const unsigned char *c = (const unsigned char *)p;
    for (const shared_array &a : g_block->shared)
        if (c >= a.p && c + bytes <= a.p + a.bytes) return &a;
    return nullptr;
}

static void race_check(const void *p, size_t bytes, int kind, const void *pc);
static void race_landed(thread_t *t, const void *p, size_t bytes);
static bool g_race_on = false;                  /* set by any __tsan_ hook  */

void cp_async(const char *file, int line, void *smem, const void *gmem, int bytes)
{
    thread_t *t = self("cp.async");
    if (bytes != 4 && bytes != 8 && bytes != 16)
        fail("%s: cp.async of %d bytes at %s:%d (4, 8 or 16)", where(*t).c_str(), bytes,
             base_name(file), line);
    if (((uintptr_t)smem | (uintptr_t)gmem) % (unsigned)bytes)
        fail("%s: cp.async of %d bytes at %s:%d from %p to %p: both must be %d-aligned",
             where(*t).c_str(), bytes, base_name(file), line, gmem, smem, bytes);
    shared_array *a = (shared_array *)shared_at(smem, (size_t)bytes);
    if (!a)
        fail("%s: cp.async at %s:%d writes %p, outside the block's shared memory",
             where(*t).c_str(), base_name(file), line, smem);
    /* Two copies in flight to the same bytes land in no defined order (nor
       does a wait order them: each thread's wait covers its own groups),
       so the second is an error whatever order the emulator would land
       them in, in every build, not only the race check's.               */
    if (!a->flight && !(a->flight = (unsigned char *)calloc(a->bytes, 1)))
        fail("out of host memory (%zu bytes)", a->bytes);
    const size_t off = (size_t)((unsigned char *)smem - a->p);
    for (size_t i = off; i < off + (size_t)bytes; i++)
        if (a->flight[i]) {
            const unsigned char *b = a->p + i;
            const thread_t *o = nullptr;
            const copy_t *oc = nullptr;
            for (unsigned k = 0; k < g_block->n_threads && !oc; k++)
                for (const copy_t &c : (*g_block->threads)[k].copies)
                    if (b >= (const unsigned char *)c.dst && b < (const unsigned char *)c.dst + c.bytes) {
                        o = &(*g_block->threads)[k];
                        oc = &c;
                        break;
                    }
            fail("%s: cp.async at %s:%d into shared memory '%s' byte %zu, while a cp.async "
                 "issued at %s:%d by thread %u is still in flight to it (two copies in flight "
                 "to the same bytes land in no defined order)", where(*t).c_str(),
                 base_name(file), line, a->name, i, oc ? base_name(oc->file) : "?",
                 oc ? oc->line : 0, o ? o->tid : ~0u);
        }
    memset(a->flight + off, 1, (size_t)bytes);
    memset(smem, 0xFF, (size_t)bytes);         /* in flight: reads see 0xFF  */
    if (g_race_on) race_check(smem, (size_t)bytes, 2, __builtin_return_address(0));
    copy_t c = { smem, gmem, bytes, ~0u, file, line };
    t->copies.push_back(c);
}
void cp_async_commit(void)
{
    thread_t *t = self("cp.async.commit_group");
    t->committed++;
    for (copy_t &c : t->copies)
        if (c.group == ~0u) c.group = t->committed;
}
/* cp.async.wait_group N: all but the N most recent committed groups land. */
void cp_async_wait(const char *file, int line, int newest_left)
{
    thread_t *t = self("cp.async.wait_group");
    (void)file; (void)line;
    std::vector<copy_t> left;
    for (const copy_t &c : t->copies) {
        if (c.group != ~0u && c.group + (unsigned)newest_left <= t->committed) {
            memcpy(c.dst, c.src, (size_t)c.bytes);
            shared_array *a = (shared_array *)shared_at(c.dst, (size_t)c.bytes);
            memset(a->flight + ((unsigned char *)c.dst - a->p), 0, (size_t)c.bytes);
            race_landed(t, c.dst, (size_t)c.bytes);
        } else {
            left.push_back(c);
        }
    }
    t->copies.swap(left);
}

/* ======================================================================== */
/* 6. the race check                                                        */
/* ======================================================================== */
/* One shadow cell per byte of shared memory: the last writer and the
   last two distinct readers since that write, each with the barrier and
   warp-exchange counts at its access and the code address. Two accesses
   are ordered when a __syncthreads completed between them, or, for two
   lanes of one warp, a warp exchange of that warp.                        */
struct access { int tid = -1; unsigned bar = 0, wsync = 0; const void *pc = nullptr; };
struct cell { access w, r[2]; bool in_flight = false; };
static std::map<const void *, std::vector<cell>> g_shadow;   /* per array  */

static bool ordered(const access &a, const thread_t *t)
{
    if (a.tid < 0 || a.tid == (int)t->tid) return true;
    if (g_block->barriers > a.bar) return true;
    return (unsigned)a.tid / 32 == t->warp && g_block->warp_syncs[t->warp] > a.wsync;
}
static access now(const thread_t *t, const void *pc)
{
    access a;
    a.tid = (int)t->tid;
    a.bar = g_block->barriers;
    a.wsync = g_block->warp_syncs[t->warp];
    a.pc = pc;
    return a;
}

/* "file:line (function)" of a code address, through addr2line.           */
static std::string symbolize(const void *pc)
{
    if (!pc) return "a cp.async landing";
    struct base_t { uintptr_t addr = 0; } base;
    dl_iterate_phdr([](dl_phdr_info *info, size_t, void *d) {
        ((base_t *)d)->addr = info->dlpi_addr;
        return 1;                                  /* the executable comes first */
    }, &base);
    char cmd[256], line[512];
    snprintf(cmd, sizeof cmd, "addr2line -C -f -e /proc/%d/exe 0x%lx 2>/dev/null", (int)getpid(),
             (unsigned long)((uintptr_t)pc - 1 - base.addr));
    std::string fn, at;
    if (FILE *f = popen(cmd, "r")) {
        if (fgets(line, sizeof line, f)) fn = line;
        if (fgets(line, sizeof line, f)) at = line;
        pclose(f);
    }
    while (!fn.empty() && fn.back() == '\n') fn.pop_back();
    while (!at.empty() && at.back() == '\n') at.pop_back();
    if (at.empty() || at[0] == '?') {
        char b[40];
        snprintf(b, sizeof b, "pc %p", pc);
        return b;
    }
    if (fn.size() > 90) fn = fn.substr(0, 87) + "...";
    return std::string(base_name(at.c_str())) + " (" + fn + ")";
}

[[noreturn]] static void race(const thread_t *t, const char *mine, const void *pc,
                              const access &other, const char *theirs, const shared_array *a,
                              size_t off)
{
    const thread_t &o = (*g_block->threads)[(unsigned)other.tid];
    fail("race on shared memory '%s' byte %zu: %s %s it at %s; %s %s it at %s, and no "
         "__syncthreads (or warp exchange, within a warp) comes between", a->name, off,
         where(*t).c_str(), mine, symbolize(pc).c_str(), where(o).c_str(), theirs,
         symbolize(other.pc).c_str());
}

/* ------------------------------------------------------------------------ */
/* Shared-memory bank conflicts (the race build: the hooks see every load
   and store with its code address). A REQUEST is one access site (code
   address) executed by a warp's lanes: lane l's n-th execution of the
   site since the warp's last full-warp exchange or barrier goes with the
   other lanes' n-th (between two such points the lanes run the same
   code, one after another). It is complete at the next such point.
   Its WAVEFRONTS, after NVIDIA's description of shared memory (32 banks
   of 4 bytes; a 64-bit access served a half-warp, a 128-bit one a
   quarter-warp at a time): per phase of lanes (32 lanes for accesses of
   up to 4 bytes, 16 for 8, 8 for 16), the most distinct 4-byte words any
   one bank holds among the phase's addresses (one word read by many
   lanes is a broadcast: one); summed over the phases with an access.
   IDEAL is the number of those phases (the least the width allows), so
   wavefronts / ideal is 1 without conflicts and 4 for four-way ones.
   Each array's offsets are taken from a 128-byte boundary (the bank of
   byte b of an array is b / 4 % 32): the emulator's arrays are separate
   host blocks, a GPU's are laid out one after another. The width is that
   of the access as the host compiler emits it (a uint4 copy is one
   16-byte access; four 32-bit reads are four requests), which is also
   how nvcc emits it unless it merges or splits loads.
   KVQ_EMU_BANKS=path appends, at exit, one line per kernel (and its
   sites with conflicts) to path; make test-cuda-emu's bank gate reads it. */
struct bank_acc { uint8_t lane, bytes; uint32_t off; };
struct bank_stat { uint64_t requests = 0, wavefronts = 0, ideal = 0; int kind = 0; };
struct bank_kernel { std::string name; std::map<const void *, bank_stat> sites; };
static std::map<const void *, bank_kernel> g_banks;          /* per kernel  */
/* per warp: lane l's count of each site since the last flush, and the
   pending requests by (site, n)                                          */
struct bank_warp {
    std::map<const void *, std::vector<uint32_t>> count;
    std::map<std::pair<const void *, uint32_t>, std::vector<bank_acc>> pending;
};
static std::vector<bank_warp> g_bank_warps;
static const char *g_bank_path = nullptr;
static bool g_bank_read = false;

static bool g_bank_on = false;
static pid_t g_bank_pid = 0;                 /* a forked child reports nothing */
static bool banks_on(void)
{
    if (!g_bank_read) {
        g_bank_read = true;
        g_bank_pid = getpid();
        g_bank_path = getenv("KVQ_EMU_BANKS");
        if (g_bank_path && !*g_bank_path) g_bank_path = nullptr;
        if (g_bank_path) g_bank_on = true;
    }
    return g_bank_on;
}
void banks_count(bool on) { (void)banks_on(); g_bank_on = on; }
bool bank_totals(const void *kernel, uint64_t *requests, uint64_t *wavefronts, uint64_t *ideal)
{
    *requests = *wavefronts = *ideal = 0;
    auto it = g_banks.find(kernel);
    if (it == g_banks.end()) return false;
    for (auto &x : it->second.sites) {
        *requests += x.second.requests;
        *wavefronts += x.second.wavefronts;
        *ideal += x.second.ideal;
    }
    return *requests > 0;
}

static void banks_access(const thread_t *t, const shared_array *a, size_t off, size_t bytes, int kind,
                         const void *pc)
{
    if (!banks_on() || bytes > 16) return;    /* a range (memcpy): not one access */
    if (g_bank_warps.size() < (g_block->n_threads + 31) / 32) g_bank_warps.resize((g_block->n_threads + 31) / 32);
    bank_warp &w = g_bank_warps[t->warp];
    std::vector<uint32_t> &c = w.count[pc];
    if (c.empty()) c.assign(32, 0);
    const uint32_t n = c[t->lane]++;
    /* the array's offset from 128-byte boundaries: its index among the
       block's arrays keeps two arrays' requests apart                  */
    const uint32_t base = (uint32_t)(a - g_block->shared.data()) << 24;
    w.pending[std::make_pair(pc, n)].push_back({ (uint8_t)t->lane, (uint8_t)bytes, base + (uint32_t)off });
    bank_stat &st = g_banks[g_block->launch->fn].sites[pc];
    st.kind = kind;
}

static void banks_request(const void *pc, const std::vector<bank_acc> &v)
{
    unsigned width = 0;
    for (const bank_acc &x : v) width = std::max(width, (unsigned)x.bytes);
    const unsigned per_phase = width <= 4 ? 32 : 128 / width;
    uint64_t wf = 0, ideal = 0;
    for (unsigned p0 = 0; p0 < 32; p0 += per_phase) {
        uint32_t words[32][32];              /* per bank: distinct words    */
        unsigned n_in[32] = {}, most = 0;
        bool any = false;
        for (const bank_acc &x : v) {
            if (x.lane < p0 || x.lane >= p0 + per_phase) continue;
            any = true;
            for (uint32_t wd = x.off / 4; wd <= (x.off + x.bytes - 1) / 4; wd++) {
                const unsigned bank = wd % 32;
                bool seen = false;
                for (unsigned k = 0; k < n_in[bank] && !seen; k++) seen = words[bank][k] == wd;
                if (!seen && n_in[bank] < 32) words[bank][n_in[bank]++] = wd;
                most = std::max(most, n_in[bank]);
            }
        }
        if (any) { ideal++; wf += most; }
    }
    bank_stat &st = g_banks[g_block->launch->fn].sites[pc];
    st.requests++;
    st.wavefronts += wf;
    st.ideal += ideal;
}

static void banks_flush(unsigned warp)
{
    if (!banks_on() || warp >= g_bank_warps.size()) return;
    bank_warp &w = g_bank_warps[warp];
    for (const auto &r : w.pending) banks_request(r.first.first, r.second);
    w.pending.clear();
    w.count.clear();
}
static void banks_flush_all(void)
{
    if (!banks_on()) return;
    if (g_block && !g_banks[g_block->launch->fn].name.size())
        g_banks[g_block->launch->fn].name = kernel_name(*g_block->launch);
    for (unsigned i = 0; i < g_bank_warps.size(); i++) banks_flush(i);
}

/* The report (at exit): per kernel, its requests, wavefronts and ideal
   wavefronts, and the ratio; then its worst four sites above 1.0.       */
static void banks_report(void)
{
    if (!g_bank_path || g_banks.empty() || getpid() != g_bank_pid) return;
    FILE *f = fopen(g_bank_path, "a");
    if (!f) { fprintf(stderr, "kvq_emu: cannot append to KVQ_EMU_BANKS=%s\n", g_bank_path); return; }
    for (auto &k : g_banks) {
        uint64_t r = 0, w = 0, i = 0;
        for (auto &x : k.second.sites) { r += x.second.requests; w += x.second.wavefronts; i += x.second.ideal; }
        if (!r) continue;
        fprintf(f, "banks %.6f wavefronts/ideal, %.4f wavefronts per request, %llu requests: %s\n",
                i ? (double)w / (double)i : 1.0, (double)w / (double)r, (unsigned long long)r,
                k.second.name.c_str());
        std::vector<std::pair<double, const void *>> bad;
        for (auto &x : k.second.sites)
            if (x.second.wavefronts > x.second.ideal)
                bad.push_back({ (double)x.second.wavefronts / (double)x.second.ideal, x.first });
        std::sort(bad.rbegin(), bad.rend());
        if (bad.size() > 4) bad.resize(4);          /* the worst four sites */
        for (auto &b : bad) {
            const bank_stat &st = k.second.sites[b.second];
            fprintf(f, "  site %.3f wavefronts/ideal, %llu requests, %s at %s\n", b.first,
                    (unsigned long long)st.requests, st.kind ? "store" : "load", symbolize(b.second).c_str());
        }
    }
    fclose(f);
}
static struct banks_at_exit { ~banks_at_exit() { banks_report(); } } g_banks_at_exit;

/* kind: 0 read, 1 write, 2 a cp.async issued (the bytes are in flight
   until its wait: a write now whose value is not there yet).              */
static void race_check(const void *p, size_t bytes, int kind, const void *pc)
{
    thread_t *t = g_cur;
    if (!t || !g_block) return;
    const shared_array *a = shared_at(p, bytes);
    if (!a) return;
    std::vector<cell> &sh = g_shadow[a->p];
    if (sh.size() != a->bytes) sh.assign(a->bytes, cell());
    const size_t off = (size_t)((const unsigned char *)p - a->p);
    if (kind != 2) banks_access(t, a, off, bytes, kind, pc);
    const char *mine = kind == 0 ? "reads" : kind == 1 ? "writes" : "copies (cp.async) into";
    for (size_t i = off; i < off + bytes; i++) {
        cell &c = sh[i];
        if (kind == 1 && c.in_flight)
            fail("%s writes shared memory '%s' byte %zu at %s while a cp.async issued at %s by "
                 "thread %d is still in flight to it (the copy would land over the store)",
                 where(*t).c_str(), a->name, i, symbolize(pc).c_str(), symbolize(c.w.pc).c_str(),
                 c.w.tid);
        if (kind == 0 && c.in_flight)
            fail("%s reads shared memory '%s' byte %zu at %s while a cp.async issued at %s by "
                 "thread %d is still in flight (no cp.async.wait_group covers it)",
                 where(*t).c_str(), a->name, i, symbolize(pc).c_str(),
                 symbolize(c.w.pc).c_str(), c.w.tid);
        if (!ordered(c.w, t)) race(t, mine, pc, c.w, "wrote", a, i);
        if (kind == 0) {
            if (c.w.tid < 0)
                fail("%s reads shared memory '%s' byte %zu at %s, which no thread of the "
                     "block has written", where(*t).c_str(), a->name, i, symbolize(pc).c_str());
            if (c.r[0].tid == (int)t->tid) c.r[0] = now(t, pc);
            else { c.r[1] = c.r[0]; c.r[0] = now(t, pc); }
        } else {
            for (access &r : c.r)
                if (!ordered(r, t)) race(t, mine, pc, r, "read", a, i);
            c.w = now(t, pc);
            c.r[0] = c.r[1] = access();
            c.in_flight = kind == 2;
        }
    }
}
/* A cp.async landing: its bytes are the issuing thread's write, now.      */
static void race_landed(thread_t *t, const void *p, size_t bytes)
{
    if (!g_race_on || t != g_cur) return;
    const shared_array *a = shared_at(p, bytes);
    if (!a) return;
    std::vector<cell> &sh = g_shadow[a->p];
    if (sh.size() != a->bytes) sh.assign(a->bytes, cell());
    const size_t off = (size_t)((const unsigned char *)p - a->p);
    for (size_t i = off; i < off + bytes; i++) {
        const void *pc = sh[i].w.pc;
        sh[i].w = now(t, pc);
        sh[i].in_flight = false;
    }
}
static void race_reset(void) { g_shadow.clear(); }     /* a block's shadow goes with it */

}   /* namespace kvq_emu */

/* The hooks -fsanitize=thread compiles into every load and store of the
   kernels' translation unit (GCC and clang name them alike).             */
#define KVQ_EMU_HOOK(name, n, w)                                                          \
    extern "C" void name(void *p)                                                         \
    {                                                                                     \
        kvq_emu::g_race_on = true;                                                        \
        kvq_emu::race_check(p, n, w, __builtin_return_address(0));                        \
    }
#define KVQ_EMU_HOOKS(n) \
    KVQ_EMU_HOOK(__tsan_read##n, n, 0) KVQ_EMU_HOOK(__tsan_write##n, n, 1) \
    KVQ_EMU_HOOK(__tsan_unaligned_read##n, n, 0) KVQ_EMU_HOOK(__tsan_unaligned_write##n, n, 1) \
    KVQ_EMU_HOOK(__tsan_volatile_read##n, n, 0) KVQ_EMU_HOOK(__tsan_volatile_write##n, n, 1)
KVQ_EMU_HOOKS(1)
KVQ_EMU_HOOKS(2)
KVQ_EMU_HOOKS(4)
KVQ_EMU_HOOKS(8)
KVQ_EMU_HOOKS(16)
extern "C" void __tsan_read_range(void *p, unsigned long n)
{
    kvq_emu::g_race_on = true;
    kvq_emu::race_check(p, n, 0, __builtin_return_address(0));
}
extern "C" void __tsan_write_range(void *p, unsigned long n)
{
    kvq_emu::g_race_on = true;
    kvq_emu::race_check(p, n, 1, __builtin_return_address(0));
}
extern "C" void __tsan_init(void) { kvq_emu::g_race_on = true; }   /* an instrumented TU's constructor */
extern "C" void __tsan_func_entry(void *) {}
extern "C" void __tsan_func_exit(void) {}
extern "C" void __tsan_vptr_update(void **, void *) {}
extern "C" void __tsan_vptr_read(void **) {}
extern "C" void __tsan_ignore_thread_begin(void) {}
extern "C" void __tsan_ignore_thread_end(void) {}

namespace kvq_emu {
bool race_checking(void) { return g_race_on; }

__attribute__((noinline)) void ld_vec(void *dst, const void *src, int bytes)
{
    thread_t *t = self("a vector load");
    if ((bytes != 8 && bytes != 16) || (uintptr_t)src % (unsigned)bytes)
        fail("%s: a %d-byte vector load from %p (8 or 16 bytes, aligned to its size)",
             where(*t).c_str(), bytes, src);
    if (g_race_on) race_check(src, (size_t)bytes, 0, __builtin_return_address(0));
    memcpy(dst, src, (size_t)bytes);
}

/* ======================================================================== */
/* 7. launches and the host API                                             */
/* ======================================================================== */
static cudaError_t g_last_error = cudaSuccess;
static std::map<uintptr_t, size_t> g_allocs;          /* device allocations */
static std::map<const void *, int> g_max_dynamic;     /* per kernel          */

static cudaError_t set_error(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static cudaError_t set_error(cudaError_t e, const char *fmt, ...)
{
    if (getenv("KVQ_EMU_VERBOSE")) {
        va_list ap;
        va_start(ap, fmt);
        fputs("kvq_emu: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    return e;
}

void launch(const launch_desc &d)
{
    read_options();
    if (g_cur) fail("%s launched from inside a kernel (dynamic parallelism is not modelled)", d.name);
    const dim3 g = d.grid, b = d.block;
    const size_t n_threads = (size_t)b.x * b.y * b.z, n_blocks = (size_t)g.x * g.y * g.z;
    int max_dyn = 48 * 1024;
    auto it = g_max_dynamic.find(d.fn);
    if (it != g_max_dynamic.end()) max_dyn = it->second;
    if (n_threads == 0 || n_threads > 1024 || b.z > 64 || n_blocks == 0 || g.y > 65535 ||
        g.z > 65535) {
        g_last_error = set_error(cudaErrorInvalidConfiguration, "%s at %s:%d: grid (%u,%u,%u) "
                                 "block (%u,%u,%u)", d.name, base_name(d.file), d.line, g.x, g.y,
                                 g.z, b.x, b.y, b.z);
        return;
    }
    if (d.dyn_smem > (size_t)max_dyn) {
        g_last_error = set_error(cudaErrorInvalidValue, "%s at %s:%d: %zu bytes of dynamic shared "
                                 "memory, the kernel's limit is %d (cudaFuncSetAttribute)",
                                 d.name, base_name(d.file), d.line, d.dyn_smem, max_dyn);
        return;
    }
    if (g_threads.size() < n_threads) g_threads.resize(n_threads);
    std::vector<size_t> order(n_blocks);
    for (size_t i = 0; i < n_blocks; i++) order[i] = i;
    if (g_rng)
        for (size_t i = n_blocks; i > 1; i--) std::swap(order[i - 1], order[rng_next() % i]);
    for (size_t k = 0; k < n_blocks; k++) {
        const size_t i = order[k];
        block_t blk;
        blk.launch = &d;
        blk.idx = { (unsigned)(i % g.x), (unsigned)(i / g.x % g.y), (unsigned)(i / g.x / g.y) };
        blk.n_threads = (unsigned)n_threads;
        blk.threads = &g_threads;
        blk.warp_syncs.assign((n_threads + 31) / 32, 0);
        blk.dynamic = poisoned_block(d.dyn_smem, 16);
        blk.shared_bytes = d.dyn_smem;
        blk.shared.push_back({ &blk, blk.dynamic, d.dyn_smem, "extern __shared__" });
        g_block = &blk;
        g_block_serial = i;
        race_reset();
        run_block(blk);
        banks_flush_all();
        race_reset();
        for (shared_array &a : blk.shared) { free(a.p); free(a.flight); }
        g_block = nullptr;
    }
}

/* -- device memory --------------------------------------------------------- */
/* The allocation holding [p, p + n), or end().                             */
static std::map<uintptr_t, size_t>::iterator alloc_of(const void *p, size_t n)
{
    const uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return g_allocs.end();
    --it;
    if (a >= it->first && a - it->first <= it->second && n <= it->second - (a - it->first))
        return it;
    return g_allocs.end();
}
static bool on_device(const void *p, size_t n) { return alloc_of(p, n) != g_allocs.end(); }

}   /* namespace kvq_emu */

using namespace kvq_emu;

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    if (!p) return cudaErrorInvalidValue;
    void *m = nullptr;
    if (posix_memalign(&m, 256, bytes ? bytes : 1)) return cudaErrorMemoryAllocation;
    memset(m, 0xFF, bytes);                    /* uninitialized reads: NaN   */
    g_allocs[(uintptr_t)m] = bytes;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end())
        return set_error(cudaErrorInvalidValue, "cudaFree(%p): not a cudaMalloc pointer", p);
    g_allocs.erase(it);
    free(p);
    return cudaSuccess;
}
/* ---- 7.1 streams and events --------------------------------------------- */
/* A created stream keeps its work in order and runs it only when some
   later work or the host must see it done (kvq_emu.h): as late as CUDA
   allows. pos counts the operations ever enqueued, done those run; an
   event recorded on a created stream marks its pos then.               */
struct kvq_emu_stream_t {
    bool blocking;
    std::vector<std::function<void()>> q;   /* q[done - base ..] still to run */
    uint64_t base = 0, done = 0, pos = 0;
};
struct kvq_emu_event_t {
    std::chrono::steady_clock::time_point t;
    cudaStream_t s = nullptr;               /* created stream, or null: done */
    uint64_t pos = 0;
};
static std::vector<cudaStream_t> g_streams;
static void stream_run_until(cudaStream_t s, uint64_t pos)
{
    while (s->done < pos && s->done < s->pos) {
        std::function<void()> op = std::move(s->q[s->done - s->base]);
        s->done++;
        op();
    }
    if (s->done == s->pos) { s->q.clear(); s->base = s->done; }
}
/* the default stream's work waits for the blocking streams' earlier work */
static void streams_before_default(void)
{
    for (cudaStream_t s : g_streams)
        if (s->blocking) stream_run_until(s, s->pos);
}
bool kvq_emu::stream_defers(cudaStream_t s)
{
    if (!s) streams_before_default();
    return s != nullptr;
}
static unsigned long g_stream_launches = 0;
unsigned long kvq_emu::stream_launches(void) { return g_stream_launches; }
void kvq_emu::stream_enqueue(cudaStream_t s, std::function<void()> op, bool is_launch)
{
    g_stream_launches += is_launch;
    s->q.push_back(std::move(op));
    s->pos++;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    if (!s || (flags & ~(unsigned)cudaStreamNonBlocking)) return cudaErrorInvalidValue;
    *s = new kvq_emu_stream_t();
    (*s)->blocking = !(flags & cudaStreamNonBlocking);
    g_streams.push_back(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    auto it = std::find(g_streams.begin(), g_streams.end(), s);
    if (!s || it == g_streams.end()) return cudaErrorInvalidValue;
    stream_run_until(s, s->pos);             /* its work still completes     */
    g_streams.erase(it);
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    if (!e || flags) return cudaErrorInvalidValue;
    if (!e->s) { kvq_emu::stream_defers(s); return cudaSuccess; }
    cudaStream_t from = e->s;
    const uint64_t pos = e->pos;
    if (kvq_emu::stream_defers(s)) kvq_emu::stream_enqueue(s, [from, pos]() { stream_run_until(from, pos); });
    else stream_run_until(from, pos);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    streams_before_default();
    if (n == 0) return cudaSuccess;
    if (!dst || !src) return cudaErrorInvalidValue;
    const bool dd = on_device(dst, n), sd = on_device(src, n);
    bool ok = false;
    switch (kind) {
    case cudaMemcpyHostToHost: ok = !dd && !sd; break;
    case cudaMemcpyHostToDevice: ok = dd && !on_device(src, 1); break;
    case cudaMemcpyDeviceToHost: ok = sd && !on_device(dst, 1); break;
    case cudaMemcpyDeviceToDevice: ok = dd && sd; break;
    case cudaMemcpyDefault: ok = (dd || !on_device(dst, 1)) && (sd || !on_device(src, 1)); break;
    }
    if (!ok)
        return set_error(cudaErrorInvalidValue, "cudaMemcpy(%p, %p, %zu, kind %d): a pointer is "
                         "on the wrong side or runs past its allocation", dst, src, n, (int)kind);
    memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s)
{
    if (s) stream_run_until(s, s->pos);      /* its stream's work first, then it */
    return cudaMemcpy(dst, src, n, kind);
}
static unsigned long g_memset_calls = 0;
unsigned long kvq_emu::memset_calls(void) { return g_memset_calls; }
cudaError_t cudaMemset(void *p, int value, size_t n)
{
    g_memset_calls++;
    streams_before_default();
    if (n == 0) return cudaSuccess;
    if (!on_device(p, n))
        return set_error(cudaErrorInvalidValue, "cudaMemset(%p, %zu): not inside one device "
                         "allocation", p, n);
    memset(p, value, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s)
{
    if (s) stream_run_until(s, s->pos);
    return cudaMemset(p, value, n);
}
cudaError_t cudaDeviceSynchronize(void)
{
    for (size_t i = 0; i < g_streams.size(); i++) stream_run_until(g_streams[i], g_streams[i]->pos);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (s) stream_run_until(s, s->pos);
    else streams_before_default();
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void)
{
    const cudaError_t e = g_last_error;
    g_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_last_error; }
const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}
cudaError_t cudaGetDevice(int *dev)
{
    if (!dev) return cudaErrorInvalidValue;
    *dev = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaGetDeviceCount(int *n)
{
    if (!n) return cudaErrorInvalidValue;
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
    if (!p || dev != 0) return cudaErrorInvalidValue;
    read_options();
    memset(p, 0, sizeof *p);
    char model[32];
    snprintf(p->name, sizeof p->name, "kvq CPU emulator (sm_90 model, %s MMA)",
             kvq_mma_model::name(g_mma, model, sizeof model));
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = g_sms;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->sharedMemPerBlock = 48 * 1024;
    p->sharedMemPerBlockOptin = 227 * 1024;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->totalGlobalMem = (size_t)80 << 30;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int dev)
{
    if (!value || dev != 0) return cudaErrorInvalidValue;
    read_options();
    if (attr == cudaDevAttrMultiProcessorCount) *value = g_sms;
    else if (attr == cudaDevAttrMaxSharedMemoryPerBlockOptin) *value = 227 * 1024;
    else return cudaErrorInvalidValue;
    return cudaSuccess;
}
static unsigned long g_func_attr_calls = 0;
unsigned long kvq_emu::func_attribute_calls(void) { return g_func_attr_calls; }
cudaError_t cudaFuncSetAttribute(const void *fn, cudaFuncAttribute attr, int value)
{
    g_func_attr_calls++;
    if (fn && attr == cudaFuncAttributePreferredSharedMemoryCarveout)  /* a hint: checked, kept nowhere */
        return value >= -1 && value <= 100 ? cudaSuccess : cudaErrorInvalidValue;
    if (!fn || attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    if (value < 0 || value > 227 * 1024)
        return set_error(cudaErrorInvalidValue, "cudaFuncSetAttribute: %d bytes of dynamic shared "
                         "memory (at most 227 KB)", value);
    g_max_dynamic[fn] = value;
    return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *fn, int threads,
                                                          size_t dyn_smem)
{
    if (!n || !fn || threads <= 0 || threads > 1024) return cudaErrorInvalidValue;
    int by_threads = 2048 / threads, by_smem = (int)((228 * 1024) / (dyn_smem + 1024));
    *n = std::min(32, std::min(by_threads, by_smem));
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    if (!e) return cudaErrorInvalidValue;
    *e = new kvq_emu_event_t();
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    if (flags & ~(unsigned)cudaEventDisableTiming) return cudaErrorInvalidValue;
    return cudaEventCreate(e);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
/* a timing on a created stream reads the host's clock at the record, not
   when the deferred work ran: no timing on the emulator means anything */
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!e) return cudaErrorInvalidValue;
    e->t = std::chrono::steady_clock::now();
    if (!kvq_emu::stream_defers(s)) { e->s = nullptr; return cudaSuccess; }
    e->s = s;
    e->pos = s->pos;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!e) return cudaErrorInvalidValue;
    if (e->s) stream_run_until(e->s, e->pos);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    if (!ms || !a || !b) return cudaErrorInvalidValue;
    *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
    return cudaSuccess;
}

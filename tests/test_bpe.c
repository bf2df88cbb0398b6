/* tests/test_bpe.c - the byte-level BPE tokenizer (examples/llm/bpe.h) against
   independent expectations. Needs no model file.

   Groups (each is a function below):
     1. pre-tokenizer: hand-derived splits of the "smollm" regexes
        (contractions, spaces, digits, punctuation, newlines, trailing
        spaces, a few non-ASCII cases); each expected split was derived by
        reading the regex, and agrees with Hugging Face tokenizers' own
        Digits(individual) + ByteLevel pre-tokenizer.
     2. BPE merging vs a brute-force reference written here: an ASCII
        pre-tokenizer that tries the regex alternatives with backtracking,
        and a naive merger that rescans every adjacent pair and every merge
        rule (by string comparison) for the lowest rank, leftmost first.
        Random vocabularies, random texts, long words, ties.
     3. decode(encode(s)) == s on random byte strings.
     4. special tokens, missing byte tokens, duplicate merges.
     5. bad input: NULL, empty, malformed or unknown merges, small buffers.

   The test builds its vocabularies itself, in the byte-to-unicode form a
   GGUF file stores, with its own copy of GPT-2's mapping.
   -DKVQ_TEST_QUICK (the sanitizer build) shrinks the loop counts.         */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KVQ_IMPLEMENTATION
#include "kvq.h"
#include "examples/llm/bpe.h"
#include "tests/test.h"

#ifdef KVQ_TEST_QUICK
#define N_VOCABS 3
#define N_TEXTS  60
#define LONG_WORD 120
#else
#define N_VOCABS 12
#define N_TEXTS  400
#define LONG_WORD 300
#endif

/* ------------------------------------------------------------------------ */
/* Helpers: RNG, and a growable vocabulary kept both as raw bytes (for the
   reference) and in GPT-2's printable form (what bpe_init reads).           */
/* ------------------------------------------------------------------------ */
static unsigned long long rng_s = 88172645463325252ull;
static unsigned rnd(unsigned n)
{
    rng_s ^= rng_s << 13; rng_s ^= rng_s >> 7; rng_s ^= rng_s << 17;
    return (unsigned)(rng_s % n);
}

/* GPT-2's bytes_to_unicode, written out from its definition: the bytes in
   '!'..'~', 0xA1..0xAC, 0xAE..0xFF keep their code point, the others get
   256, 257, ... in increasing byte order.                                   */
static unsigned b2u(unsigned b)
{
    unsigned k, extra = 0;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174)) return b;
    for (k = 0; k < b; k++)
        if (!((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || (k >= 174))) extra++;
    return 256 + extra;
}

/* raw bytes -> printable form (UTF-8 of the mapped code points) */
static char *to_printable(const char *raw, size_t n)
{
    char *s = (char *)malloc(2 * n + 1), *p = s;
    size_t i;
    for (i = 0; i < n; i++) {
        unsigned c = b2u((unsigned char)raw[i]);
        if (c < 0x80) *p++ = (char)c;
        else { *p++ = (char)(0xC0 | (c >> 6)); *p++ = (char)(0x80 | (c & 0x3F)); }
    }
    *p = '\0';
    return s;
}

#define MAXV 1024
typedef struct {
    int n, nm;
    char *raw[MAXV];  int rawlen[MAXV];  char *txt[MAXV];  int type[MAXV];
    int ml[MAXV], mr[MAXV];          /* merge r joins tokens ml[r], mr[r]   */
    char *mtxt[MAXV];                /* "left right", printable             */
} vocab;

static int v_find(const vocab *v, const char *raw, int n)  /* linear: naive */
{
    int i;
    for (i = 0; i < v->n; i++)
        if (v->rawlen[i] == n && memcmp(v->raw[i], raw, (size_t)n) == 0) return i;
    return -1;
}

static int v_add(vocab *v, const char *raw, int n, int type)
{
    int i = v->n++;
    v->raw[i] = (char *)malloc((size_t)n + 1);
    memcpy(v->raw[i], raw, (size_t)n);
    v->raw[i][n] = '\0';
    v->rawlen[i] = n;
    v->type[i] = type;
    v->txt[i] = type == BPE_TOKEN_CONTROL ? strcpy((char *)malloc((size_t)n + 1), raw)
                                          : to_printable(raw, (size_t)n);
    return i;
}

/* adds the merge (a, b) and, if new, the token a ++ b */
static void v_merge(vocab *v, int a, int b)
{
    char buf[256];
    int n = v->rawlen[a] + v->rawlen[b], r = v->nm++;
    memcpy(buf, v->raw[a], (size_t)v->rawlen[a]);
    memcpy(buf + v->rawlen[a], v->raw[b], (size_t)v->rawlen[b]);
    if (v_find(v, buf, n) < 0) v_add(v, buf, n, BPE_TOKEN_NORMAL);
    v->ml[r] = a; v->mr[r] = b;
    v->mtxt[r] = (char *)malloc(strlen(v->txt[a]) + strlen(v->txt[b]) + 2);
    sprintf(v->mtxt[r], "%s %s", v->txt[a], v->txt[b]);
}

static void v_bytes(vocab *v)              /* the 256 one-byte tokens     */
{
    int b;
    for (b = 0; b < 256; b++) { char c = (char)b; v_add(v, &c, 1, BPE_TOKEN_NORMAL); }
}

static void v_merge_str(vocab *v, const char *a, const char *b)
{
    int ia = v_find(v, a, (int)strlen(a)), ib = v_find(v, b, (int)strlen(b));
    if (ia < 0 || ib < 0) { printf("test vocab: no %s or %s\n", a, b); exit(1); }
    v_merge(v, ia, ib);
}

static int v_init(const vocab *v, bpe_tokenizer *t)
{
    return bpe_init(t, (const char *const *)v->txt, NULL, v->n,
                    (const char *const *)v->mtxt, NULL, v->nm, v->type);
}

static void v_free(vocab *v)
{
    int i;
    for (i = 0; i < v->n; i++) { free(v->raw[i]); free(v->txt[i]); }
    for (i = 0; i < v->nm; i++) free(v->mtxt[i]);
    v->n = v->nm = 0;
}

/* ------------------------------------------------------------------------ */
/* 1. pre-tokenizer                                                          */
/* ------------------------------------------------------------------------ */
typedef struct { const char *text; char got[512]; } pieces;

static int collect(void *ctx, size_t a, size_t b)
{
    pieces *p = (pieces *)ctx;
    size_t n = strlen(p->got);
    if (n + (b - a) + 2 >= sizeof p->got) return -1;
    p->got[n] = '|';
    memcpy(p->got + n + 1, p->text + a, b - a);
    p->got[n + 1 + (b - a)] = '\0';
    return 0;
}

static void test_pretokenizer(void)
{
    /* text, then its pieces each preceded by '|' */
    static const char *cases[][2] = {
        {"Hello world", "|Hello| world"},
        {"I'm they'll we've you'd it's 'S don't",
         "|I|'m| they|'ll| we|'ve| you|'d| it|'s| '|S| don|'t"},
        {"'re've'll'd'm't's", "|'re|'ve|'ll|'d|'m|'t|'s"},
        {"''s", "|''|s"},                      /* no contraction, a run     */
        {"a 'll", "|a| '|ll"},                 /* " ?" glues to punctuation */
        {"a  b", "|a| | b"},                   /* \s+(?!\S) gives one back  */
        {"x   y", "|x|  | y"},
        {"trailing   ", "|trailing|   "},      /* end of text: whole run    */
        {"x\n\ny", "|x|\n|\n|y"},              /* last \n: \s+ alone        */
        {"\n\n", "|\n\n"},
        {"x \n y", "|x| \n| y"},
        {"a \tb", "|a| |\t|b"},
        {"\tfoo", "|\t|foo"},                  /* \s+ before a word         */
        {"abc 2024!", "|abc| |2|0|2|4|!"},     /* digits one by one         */
        {"x2y", "|x|2|y"},
        {"3.14", "|3|.|1|4"},
        {"Hi!!! ok?", "|Hi|!!!| ok|?"},
        {" (x)", "| (|x|)"},
        {" ", "| "},
        {"caf\xC3\xA9 na\xC3\xAFve", "|caf\xC3\xA9| na\xC3\xAFve"},  /* é ï letters */
        {"don\xE2\x80\x99t", "|don|\xE2\x80\x99|t"},     /* ’ is punctuation  */
        {"x\xC2\xA0y", "|x|\xC2\xA0|y"},                 /* NBSP is \s        */
        {"x\xC2\xB2", "|x|\xC2\xB2"},                    /* ² is a number     */
    };
    size_t k;
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        pieces p;
        const char *want = cases[k][1];
        p.text = cases[k][0];
        p.got[0] = '\0';
        bpe__pretokenize((const unsigned char *)p.text, strlen(p.text), collect, &p);
        CHECK(strcmp(p.got, want) == 0, "pretokenize case %lu: got \"%s\" want \"%s\"",
              (unsigned long)k, p.got, want);
    }
}

/* ------------------------------------------------------------------------ */
/* 2. BPE vs brute force                                                     */
/* ------------------------------------------------------------------------ */
/* Reference pre-tokenizer for ASCII (plus bytes >= 0x80 as letters, the
   same reading bpe.h gives invalid UTF-8). It cuts at digits, then tries
   each regex alternative in order at each position; \s+(?!\S) tries every
   length from the longest down, as a backtracking regex engine does.       */
static int is_s(int c) { return c == ' ' || (c >= 9 && c <= 13); }
static int is_n(int c) { return c >= '0' && c <= '9'; }
static int is_l(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
static int is_o(int c) { return !is_s(c) && !is_n(c) && !is_l(c); }

static size_t ref_run(const unsigned char *s, size_t i, size_t e, int (*cls)(int))
{
    size_t j = i < e && s[i] == ' ' ? i + 1 : i;       /* " ?"            */
    size_t k = j;
    while (k < e && cls(s[k])) k++;
    return k > j ? k : 0;                              /* needs one char  */
}

static size_t ref_match(const unsigned char *s, size_t i, size_t e)
{
    static const char *con[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    size_t k, len, j;
    for (k = 0; k < 7; k++) {
        len = strlen(con[k]);
        if (i + len <= e && memcmp(s + i, con[k], len) == 0) return i + len;
    }
    if ((j = ref_run(s, i, e, is_l))) return j;
    if ((j = ref_run(s, i, e, is_n))) return j;
    if ((j = ref_run(s, i, e, is_o))) return j;
    for (j = i; j < e && is_s(s[j]); j++) {}
    for (; j > i; j--)                                 /* \s+(?!\S)       */
        if (j == e || is_s(s[j])) return j;
    return i + 1;                                      /* \s+, one char   */
}

/* Naive BPE: symbols are raw strings; each round scans every adjacent pair
   against every merge rule (string comparison) and applies the lowest rank,
   leftmost on ties. Appends the token ids (linear lookup) to out.           */
static int ref_word(const vocab *v, const unsigned char *s, size_t n, int *out)
{
    static char sym[1024][64];
    static int len[1024];
    int ns = 0, k, r, no = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        if (v_find(v, (const char *)s + i, 1) < 0) continue;   /* dropped */
        sym[ns][0] = (char)s[i]; len[ns++] = 1;
    }
    for (;;) {
        int best = -1, at = -1;
        for (k = 0; k + 1 < ns; k++)
            for (r = 0; r < v->nm && (best < 0 || r < best); r++)
                if (len[k] == v->rawlen[v->ml[r]] && len[k + 1] == v->rawlen[v->mr[r]] &&
                    memcmp(sym[k], v->raw[v->ml[r]], (size_t)len[k]) == 0 &&
                    memcmp(sym[k + 1], v->raw[v->mr[r]], (size_t)len[k + 1]) == 0) {
                    best = r; at = k;
                }
        if (best < 0) break;
        memcpy(sym[at] + len[at], sym[at + 1], (size_t)len[at + 1]);
        len[at] += len[at + 1];
        for (k = at + 1; k + 1 < ns; k++) { memcpy(sym[k], sym[k + 1], 64); len[k] = len[k + 1]; }
        ns--;
    }
    for (k = 0; k < ns; k++) out[no++] = v_find(v, sym[k], len[k]);
    return no;
}

static int ref_encode(const vocab *v, const unsigned char *s, size_t n, int *out)
{
    size_t i = 0, e, p, q;
    int no = 0;
    while (i < n) {
        if (is_n(s[i])) e = i + 1;
        else for (e = i; e < n && !is_n(s[e]); e++) {}
        for (p = i; p < e; p = q) {
            q = ref_match(s, p, e);
            no += ref_word(v, s + p, q - p, out + no);
        }
        i = e;
    }
    return no;
}

/* A random vocabulary: the 256 bytes, a few English merges, then random
   merges of tokens over a small alphabet so that words merge deeply.        */
static void random_vocab(vocab *v, int n_random)
{
    static const char *eng[][2] = {
        {"h", "e"}, {"t", "he"}, {" ", "t"}, {" t", "he"},
        {"i", "n"}, {"in", "g"}, {" ", "a"}, {"a", "n"}, {"an", "d"}, {" ", "and"},
        {"'", "s"}, {" ", " "}, {"  ", "  "}, {"\n", "\n"}, {"1", "2"}, {" ", "1"}};
    static const char alpha[] = "aeht ns'\n1.";
    int cand[MAXV], nc, tries = 0, i, j;
    size_t k;
    v_bytes(v);
    for (k = 0; k < sizeof eng / sizeof eng[0]; k++) v_merge_str(v, eng[k][0], eng[k][1]);
    while (n_random > 0 && tries++ < 100000 && v->n < MAXV - 1 && v->nm < MAXV - 1) {
        int a, b, r, dup = 0;
        for (nc = 0, i = 0; i < v->n; i++) {   /* tokens over alpha only  */
            for (j = 0; j < v->rawlen[i] && strchr(alpha, v->raw[i][j]); j++) {}
            if (j == v->rawlen[i] && v->raw[i][0]) cand[nc++] = i;
        }
        a = cand[rnd((unsigned)nc)]; b = cand[rnd((unsigned)nc)];
        if (v->rawlen[a] + v->rawlen[b] > 12) continue;
        for (r = 0; r < v->nm; r++) if (v->ml[r] == a && v->mr[r] == b) dup = 1;
        if (dup) continue;
        v_merge(v, a, b);
        n_random--;
    }
}

static size_t random_text(unsigned char *s, size_t max, int any_byte)
{
    static const char *bits[] = {"a", "e", "h", "t", "n", "s", " ", "  ", "'s", "'ll",
                                 "\n", "\n\n", "the", " the", "and", "ing", "1", "12",
                                 ".", "!", "\t", "x", "Q", " 7"};
    size_t n = 0, want = rnd((unsigned)max);
    while (n < want) {
        if (any_byte && rnd(8) == 0) { s[n++] = (unsigned char)rnd(256); continue; }
        {
            const char *b = bits[rnd(sizeof bits / sizeof bits[0])];
            size_t L = strlen(b);
            if (n + L > max) break;
            memcpy(s + n, b, L); n += L;
        }
    }
    return n;
}

static void check_against_ref(bpe_tokenizer *t, const vocab *v, const unsigned char *s,
                              size_t n, const char *what)
{
    static int got[4096], want[4096];
    long ng = bpe_encode(t, (const char *)s, n, 0, got, 4096);
    int nw = ref_encode(v, s, n, want), k, same = ng == nw;
    for (k = 0; same && k < nw; k++) same = got[k] == want[k];
    CHECK(same, "%s: bpe_encode gives %ld ids, reference %d (first differing at %d)",
          what, ng, nw, k);
}

static void test_bpe_vs_reference(void)
{
    int iv, it;
    unsigned char s[600];
    for (iv = 0; iv < N_VOCABS; iv++) {
        vocab v;
        bpe_tokenizer t;
        memset(&v, 0, sizeof v);
        random_vocab(&v, 50 + 60 * iv);
        CHECK(v_init(&v, &t) == 0, "init random vocab %d: %s", iv, t.err);
        for (it = 0; it < N_TEXTS; it++) {
            size_t n = random_text(s, sizeof s, 0);
            check_against_ref(&t, &v, s, n, "random text");
        }
        /* long words: many equal-rank candidates, leftmost must win */
        memset(s, 'a', LONG_WORD + 1);
        check_against_ref(&t, &v, s, LONG_WORD + 1, "a long run of 'a'");
        for (it = 0; it < LONG_WORD; it++) s[it] = "aeh"[it % 3];
        check_against_ref(&t, &v, s, LONG_WORD, "aeh repeated");
        bpe_free(&t);
        v_free(&v);
    }
}

/* A vocabulary with English words: fixed expectations derived by hand from
   the merge list (the reference agrees; this pins down the order too).      */
static void test_known_words(void)
{
    vocab v;
    bpe_tokenizer t;
    int ids[32];
    long n;
    memset(&v, 0, sizeof v);
    v_bytes(&v);
    v_merge_str(&v, "h", "e");      /* 0: he                               */
    v_merge_str(&v, "t", "he");     /* 1: the                              */
    v_merge_str(&v, " ", "the");    /* 2: " the"                           */
    v_merge_str(&v, "e", "r");      /* 3: er                               */
    v_merge_str(&v, "the", "r");    /* 4: ther                             */
    CHECK(v_init(&v, &t) == 0, "init: %s", t.err);
    n = bpe_encode(&t, "the other", 9, 0, ids, 32);
    /* pieces "the", " other". "the": h+e (0), t+he (1). " other":
       h+e (0) beats e+r (3), then t+he (1), then the+r (4); " "+"the" (2)
       never applies because "o" sits between: " ", o, ther              */
    CHECK(n == 4 && ids[0] == v_find(&v, "the", 3) && ids[1] == ' ' &&
          ids[2] == 'o' && ids[3] == v_find(&v, "ther", 4),
          "\"the other\": got %ld ids", n);
    bpe_free(&t);
    v_free(&v);
}

/* ------------------------------------------------------------------------ */
/* 3. round trip                                                             */
/* ------------------------------------------------------------------------ */
static void test_round_trip(void)
{
    vocab v;
    bpe_tokenizer t;
    int it, ids[700];
    unsigned char s[600];
    char back[700];
    memset(&v, 0, sizeof v);
    random_vocab(&v, 300);
    CHECK(v_init(&v, &t) == 0, "init: %s", t.err);
    for (it = 0; it < N_TEXTS; it++) {
        size_t n = random_text(s, sizeof s, it % 2);    /* odd: any byte  */
        long ni = bpe_encode(&t, (const char *)s, n, 0, ids, 700);
        long nb = ni < 0 ? -1 : bpe_decode(&t, ids, (size_t)ni, back, sizeof back);
        CHECK(ni >= 0 && (size_t)ni <= n && nb == (long)n && memcmp(back, s, n) == 0,
              "round trip %d: %lu bytes -> %ld ids -> %ld bytes", it, (unsigned long)n, ni, nb);
    }
    bpe_free(&t);
    v_free(&v);
}

/* ------------------------------------------------------------------------ */
/* 4. special tokens, missing bytes, duplicate merges                        */
/* ------------------------------------------------------------------------ */
static void test_specials_and_edges(void)
{
    vocab v;
    bpe_tokenizer t;
    int ids[64], im, ab, bc, k, sp2;
    long n;
    char out[64];

    memset(&v, 0, sizeof v);
    im = v_add(&v, "<|im_start|>", 12, BPE_TOKEN_CONTROL);
    v_add(&v, "<|im", 4, BPE_TOKEN_CONTROL);          /* a shorter prefix   */
    v_bytes(&v);
    v_merge_str(&v, " ", " ");
    sp2 = v_find(&v, "  ", 2);
    CHECK(v_init(&v, &t) == 0, "init: %s", t.err);
    n = bpe_encode(&t, "a<|im_start|>b", 14, BPE_SPECIAL, ids, 64);
    CHECK(n == 3 && ids[0] == 'a' + 2 && ids[1] == im && ids[2] == 'b' + 2,
          "special in text: got %ld ids", n);
    n = bpe_encode(&t, "a<|im_start|>b", 14, 0, ids, 64);
    CHECK(n == 14, "special ignored without BPE_SPECIAL: %ld ids", n);
    /* text before a special token is pre-tokenized as if it ended there:
       "x  " + special keeps both spaces in one piece, which merges to "  ";
       before a word, \s+(?!\S) gives the last space to " y" instead     */
    n = bpe_encode(&t, "x  <|im_start|>", 15, BPE_SPECIAL, ids, 64);
    CHECK(n == 3 && ids[0] == 'x' + 2 && ids[1] == sp2 && ids[2] == im,
          "fragment end before a special: %ld ids", n);
    n = bpe_encode(&t, "x  y", 4, BPE_SPECIAL, ids, 64);
    CHECK(n == 4 && ids[1] == ' ' + 2 && ids[2] == ' ' + 2, "x  y: %ld ids", n);
    n = bpe_encode(&t, "<|im_start|><|im", 16, BPE_SPECIAL, ids, 64);
    CHECK(n == 2 && ids[0] == im && ids[1] == 1, "longest special first: %ld", n);
    n = bpe_decode(&t, ids, 2, out, sizeof out);
    CHECK(n == 16 && strcmp(out, "<|im_start|><|im") == 0, "special decodes to text");
    bpe_free(&t);
    v_free(&v);

    /* bytes without a token are dropped and counted; neighbours still merge */
    memset(&v, 0, sizeof v);
    for (k = 0; k < 256; k++)
        if (k != 'z') { char c = (char)k; v_add(&v, &c, 1, BPE_TOKEN_NORMAL); }
    v_merge_str(&v, "a", "b");
    CHECK(v_init(&v, &t) == 0, "init: %s", t.err);
    n = bpe_encode(&t, "azb zz", 6, 0, ids, 64);
    CHECK(n == 2 && ids[0] == v_find(&v, "ab", 2) && ids[1] == ' ' && t.dropped == 3,
          "dropped bytes: %ld ids, dropped %ld", n, t.dropped);
    bpe_free(&t);
    v_free(&v);

    /* a duplicated merge pair keeps its first rank: with "a b" at rank 0
       and again at rank 2, "abc" must give ab,c (rank 0 beats "b c" at 1) */
    memset(&v, 0, sizeof v);
    v_bytes(&v);
    v_merge_str(&v, "a", "b");
    v_merge_str(&v, "b", "c");
    v_merge_str(&v, "a", "b");
    CHECK(v_init(&v, &t) == 0, "init: %s", t.err);
    ab = v_find(&v, "ab", 2); bc = v_find(&v, "bc", 2);
    n = bpe_encode(&t, "abc", 3, 0, ids, 64);
    CHECK(n == 2 && ids[0] == ab && ids[1] == 'c' && bc > 0, "duplicate merge: first rank wins");
    CHECK(bpe_token_id(&t, "bc", 2) == bc && bpe_token_id(&t, "cb", 2) == -1, "bpe_token_id");
    bpe_free(&t);
    v_free(&v);
}

/* ------------------------------------------------------------------------ */
/* 5. bad input                                                              */
/* ------------------------------------------------------------------------ */
static int init_fails(const char *const *tok, int n, const char *const *mer, int nm,
                      const char *what)
{
    bpe_tokenizer t;
    int rc = bpe_init(&t, tok, NULL, n, mer, NULL, nm, NULL);
    CHECK(rc < 0 && t.err[0] && t.tok_slot == NULL && t.bytes == NULL,
          "%s: rc %d, err \"%s\"", what, rc, t.err);
    bpe_free(&t);                              /* safe after a failure    */
    return rc;
}

static void test_bad_input(void)
{
    static const char *tok[] = {"a", "b", "ab", "\xC4\xA0"};   /* Ġ = space */
    static const char *raw_space[] = {"a", "a b"};              /* not byte-level */
    static const char *m_ok[] = {"a b"}, *m_nospace[] = {"ab"}, *m_unknown[] = {"a c"},
                      *m_nores[] = {"b a"}, *m_three[] = {"a b a"}, *m_null[] = {NULL},
                      *m_empty[] = {" a"};
    const char *tok_null[] = {"a", NULL};
    bpe_tokenizer t;
    int ids[8];
    char out[4];
    long n;

    init_fails(NULL, 3, m_ok, 1, "NULL tokens");
    init_fails(tok, 0, m_ok, 1, "no tokens");
    init_fails(tok, 3, NULL, 1, "NULL merges");
    init_fails(tok_null, 2, NULL, 0, "NULL token");
    init_fails(raw_space, 2, NULL, 0, "raw space in a normal token");
    init_fails(tok, 3, m_nospace, 1, "merge without a space");
    init_fails(tok, 3, m_unknown, 1, "merge of an unknown token");
    init_fails(tok, 3, m_nores, 1, "merge whose result is unknown");
    init_fails(tok, 3, m_three, 1, "merge with three parts");
    init_fails(tok, 3, m_null, 1, "NULL merge");
    init_fails(tok, 3, m_empty, 1, "merge with an empty half");
    CHECK(bpe_init(NULL, tok, NULL, 3, m_ok, NULL, 1, NULL) < 0, "NULL tokenizer");

    CHECK(bpe_init(&t, tok, NULL, 4, m_ok, NULL, 1, NULL) == 0, "init: %s", t.err);
    CHECK(bpe_encode(NULL, "a", 1, 0, ids, 8) < 0, "encode NULL tokenizer");
    CHECK(bpe_encode(&t, NULL, 1, 0, ids, 8) < 0 && t.err[0], "encode NULL text");
    CHECK(bpe_encode(&t, "a", 1, 0, NULL, 8) < 0, "encode NULL ids");
    CHECK(bpe_encode(&t, "", 0, 0, ids, 8) == 0, "empty text gives 0 ids");
    /* snprintf-like: the count needed, with only cap ids written */
    ids[1] = -7;
    n = bpe_encode(&t, "ab ab", 5, 0, ids, 1);
    CHECK(n == 3 && ids[0] == 2 && ids[1] == -7, "short buffer: %ld", n);
    CHECK(bpe_encode(&t, "ab ab", 5, 0, NULL, 0) == 3, "size query");
    /* pieces "ab", " ab"; the only merge is a+b: ids ab, Ġ, ab           */
    n = bpe_encode(&t, "ab ab", 5, 0, ids, 8);
    CHECK(n == 3 && ids[0] == 2 && ids[1] == 3 && ids[2] == 2, "ab ab: %ld", n);
    CHECK(bpe_decode(&t, ids, 3, out, sizeof out) == 5 && strcmp(out, "ab ") == 0,
          "decode truncates like snprintf: \"%s\"", out);
    ids[0] = 4;
    CHECK(bpe_decode(&t, ids, 1, out, sizeof out) < 0, "decode bad id");
    ids[0] = -1;
    CHECK(bpe_decode(&t, ids, 1, out, sizeof out) < 0, "decode negative id");
    CHECK(bpe_token_bytes(&t, 99, NULL) == NULL, "token_bytes bad id");
    bpe_free(&t);
    bpe_free(&t);                                     /* twice is harmless */
    CHECK(bpe_encode(&t, "a", 1, 0, ids, 8) < 0, "encode after free");
}

int main(void)
{
    test_pretokenizer();
    test_bpe_vs_reference();
    test_known_words();
    test_round_trip();
    test_specials_and_edges();
    test_bad_input();
    return TEST_END("test_bpe");
}

/* examples/llm/bpe.h - a byte-level BPE tokenizer of the GPT-2 kind, as SmolLM2
   uses it (GGUF: tokenizer.ggml.model = "gpt2", tokenizer.ggml.pre = "smollm").

   Usage (everything is static; include it where you need it):

       bpe_tokenizer tok;
       if (bpe_init(&tok, tokens, NULL, n_vocab, merges, NULL, n_merges, types))
           { fprintf(stderr, "%s\n", tok.err); exit(1); }
       long n = bpe_encode(&tok, text, strlen(text), BPE_SPECIAL, ids, cap);
       long m = bpe_decode(&tok, ids, n, buf, sizeof buf);
       bpe_free(&tok);

   The tokenizer is built from plain arrays, exactly as a GGUF file stores
   them, so it does not depend on any file reader:
     tokens  (n_vocab)  token strings in GPT-2's byte-to-unicode form ("Ġthe")
     merges  (n_merges) "left right" strings; the rank of a merge is its index
     types   (n_vocab)  llama.cpp token types (1 normal, 3 control, 4 user
                        defined, ...) or NULL; only used to find the special
                        tokens that BPE_SPECIAL matches in the text
   Each string array may come with a length array (NULL: NUL-terminated).

   Contents
     1. byte <-> unicode     GPT-2's bytes_to_unicode() and its inverse
     2. character classes    \s, \p{L}, \p{N} and "other", and what is exact
     3. pre-tokenizer        the "smollm" split: isolated digits, then the
                             GPT-2 regex
     4. hash tables          token bytes -> id, (left id, right id) -> merge
     5. build / free         bpe_init, bpe_free
     6. BPE merge            lowest rank first, with a heap
     7. encode / decode      bpe_encode, bpe_decode, bpe_token_bytes,
                             bpe_token_id

   What "smollm" means. llama.cpp (src/llama-vocab.cpp) gives the "smollm"
   pre-tokenizer the same two regexes as starcoder, refact and command-r:
       1. \p{N}                                   every digit is its own piece
       2. 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
   applied one after the other: (1) cuts the text at every numeric character,
   then (2) splits each piece between those cuts on its own, so a cut acts as
   the end of the string for the look-ahead (?!\S). This is the Hugging Face
   pipeline Digits(individual_digits=true) followed by ByteLevel(use_regex)
   whose regex ends in one more alternative, \s+, reached only by a single
   whitespace character before a non-space; section 3 implements both.
   Consequence worth knowing: " 2024" becomes " ", "2", "0", "2", "4" (the
   space does not glue to a digit the way it glues to a word).

   Exactness. For ASCII text the split is exact. Beyond ASCII the Unicode
   classes are approximated by a short table (section 2): Latin-1, combining
   diacritics, General Punctuation, super/subscripts, currency, arrows to
   dingbats, emoji and the ideographic space are classified as Unicode does;
   every other code point >= 0x100 counts as a letter (true for most
   scripts' letters, wrong for, e.g., Arabic-Indic digits or CJK punctuation).
   Invalid UTF-8 bytes each count as one letter.

   Differences from the reference tokenizers, all deliberate:
   - A byte whose single-byte token is missing from the vocabulary (SmolLM2
     lacks 21 of them, e.g. 0xC0 and 0xF5..0xFF, which never occur in valid
     UTF-8) is dropped, as Hugging Face's BPE (no unk token) and llama.cpp
     do; tok.dropped counts such bytes in the last bpe_encode call.
   - A duplicate merge pair keeps its first (lowest) rank, as llama.cpp does.
   - bpe_encode is not reentrant on one tokenizer: it grows scratch buffers
     that live in the struct (so encoding allocates nothing per token).

   Errors: functions return a negative number (or NULL) and, where they have
   a tokenizer, leave a readable reason in tok.err. Nothing calls exit().
   Allocation can be redirected with BPE_MALLOC, BPE_REALLOC and BPE_FREE
   (define all three or none).                                              */
#ifndef KVQ_EXAMPLES_BPE_H
#define KVQ_EXAMPLES_BPE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(BPE_MALLOC) != defined(BPE_FREE) || defined(BPE_MALLOC) != defined(BPE_REALLOC)
#error "define all of BPE_MALLOC, BPE_REALLOC and BPE_FREE, or none"
#endif
#ifndef BPE_MALLOC
#define BPE_MALLOC(n)     malloc(n)
#define BPE_REALLOC(p, n) realloc(p, n)
#define BPE_FREE(p)       free(p)
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BPE_API static __attribute__((unused))  /* callers use a subset */
#define BPE__PRINTF __attribute__((format(printf, 2, 3)))
#else
#define BPE_API static
#define BPE__PRINTF
#endif

/* llama.cpp's token types, as GGUF's tokenizer.ggml.token_type holds them. */
enum {
    BPE_TOKEN_NORMAL = 1, BPE_TOKEN_UNKNOWN = 2, BPE_TOKEN_CONTROL = 3,
    BPE_TOKEN_USER_DEFINED = 4, BPE_TOKEN_UNUSED = 5, BPE_TOKEN_BYTE = 6
};

/* bpe_encode flag: match special tokens written literally in the text
   ("<|im_start|>") as single tokens. Without it they are plain text.       */
#define BPE_SPECIAL 1

typedef struct {            /* one merge rule, keyed by the pair of ids     */
    uint64_t key;           /* (left id << 32) | right id; UINT64_MAX empty */
    int rank;               /* index in the merges array: lower merges first */
    int id;                 /* the id of the merged token                   */
} bpe__merge;

typedef struct {            /* one symbol of the word being merged          */
    int id;                 /* token id; -1 once merged into its left        */
    int prev, next;         /* neighbours in the word, -1 at either end      */
} bpe__sym;

typedef struct {            /* a candidate merge waiting in the heap        */
    int rank, left, right;  /* left/right: symbol indices                   */
    int lid, rid, id;       /* the ids it was computed for, and the result  */
} bpe__cand;

typedef struct {
    int    n_vocab;
    char  *bytes;           /* every token's raw bytes, back to back        */
    size_t *off;            /* (n_vocab) offset of token i in bytes         */
    int   *len;             /* (n_vocab) its length in bytes                */
    int    byte_id[256];    /* id of the one-byte token for each byte, or -1 */

    int   *tok_slot;        /* (tok_cap) open-addressing table of ids, -1   */
    size_t tok_cap;         /* power of two, >= 2 n_vocab                   */
    bpe__merge *merge_slot; /* (merge_cap)                                  */
    size_t merge_cap;       /* power of two, >= 2 n_merges                  */
    int    n_merges;

    int   *special;         /* (n_special) special ids, longest text first  */
    int    n_special;
    unsigned char special_first[256]; /* 1 if some special starts with byte */

    int    b2u[256];        /* byte -> code point (section 1)               */
    unsigned char u2b[324]; /* code point -> byte, for code points < 324    */

    bpe__sym  *sym;         /* (scratch_cap) encode scratch, grown on demand */
    bpe__cand *heap;        /* (3 scratch_cap)                              */
    size_t scratch_cap;

    long   dropped;         /* bytes without a token in the last encode     */
    char   err[160];        /* why the last call failed                     */
} bpe_tokenizer;

BPE__PRINTF static int bpe__fail(bpe_tokenizer *t, const char *fmt, ...);
static int bpe__fail(bpe_tokenizer *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err, sizeof t->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* ======================================================================== */
/* 1. byte <-> unicode (GPT-2, encoder.py bytes_to_unicode)                  */
/* ======================================================================== */
/* BPE vocabularies of this kind are trained on bytes, but stored as text, so
   each byte is given a printable code point: the 188 bytes that are already
   printable (! .. ~, ¡ .. ¬, ® .. ÿ) stand for themselves, and the other 68
   (controls, space, DEL, 0x80..0xA0, soft hyphen) take U+0100, U+0101, ...
   in byte order. Space becomes U+0120 'Ġ', newline U+010A 'Ċ'.             */
static void bpe__byte_map(bpe_tokenizer *t)
{
    int b, extra = 0;
    memset(t->u2b, 0, sizeof t->u2b);
    for (b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
                        (b >= 0xAE && b <= 0xFF);
        t->b2u[b] = printable ? b : 256 + extra++;
        t->u2b[t->b2u[b]] = (unsigned char)b;
    }
}

/* Decodes one UTF-8 code point at s[*i] (i < n) and advances *i. An invalid
   or truncated sequence yields -1 and advances by one byte.                 */
static long bpe__utf8(const unsigned char *s, size_t n, size_t *i)
{
    unsigned c = s[*i];
    int k, extra = c >= 0xC2 && c < 0xE0 ? 1 : c >= 0xE0 && c < 0xF0 ? 2 :
                   c >= 0xF0 && c < 0xF5 ? 3 : 0;
    long cp = extra == 1 ? (long)(c & 0x1F) : extra == 2 ? (long)(c & 0x0F) :
              (long)(c & 0x07);
    if (c < 0x80) { (*i)++; return (long)c; }                        /* ASCII */
    if (extra == 0 || *i + (size_t)extra >= n) { (*i)++; return -1; } /* stray,
                                                                  truncated */
    for (k = 1; k <= extra; k++) {
        if ((s[*i + k] & 0xC0) != 0x80) { (*i)++; return -1; }
        cp = (cp << 6) | (s[*i + k] & 0x3F);
    }
    /* overlong 3/4-byte forms, surrogates and > U+10FFFF are invalid */
    if ((extra == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF))) { (*i)++; return -1; }
    *i += (size_t)extra + 1;
    return cp;
}

/* Token text (byte-to-unicode form) -> raw bytes. Returns the byte count,
   or -1 if a character is outside the 256-character alphabet.              */
static long bpe__unmap(const bpe_tokenizer *t, const char *s, size_t n, char *out)
{
    size_t i = 0;
    long m = 0;
    while (i < n) {
        long cp = bpe__utf8((const unsigned char *)s, n, &i);
        if (cp < 0 || cp >= 324 || (cp != t->b2u[t->u2b[cp]])) return -1;
        out[m++] = (char)t->u2b[cp];
    }
    return m;
}

/* ======================================================================== */
/* 2. character classes                                                     */
/* ======================================================================== */
/* The regex needs four classes: whitespace (\s: Unicode White_Space, which
   is what Oniguruma, the engine behind Hugging Face tokenizers, uses),
   letters (\p{L}), numbers (\p{N}: Nd, Nl, No, the same set Rust's
   char::is_numeric uses for the Digits split) and everything else.
   Exact for every code point below U+0100 and for the blocks listed; the
   rest is called a letter (the approximation stated at the top).           */
enum { BPE__L, BPE__N, BPE__S, BPE__O };

static int bpe__class(long cp)
{
    if (cp < 0) return BPE__L;                         /* invalid UTF-8 byte */
    if (cp < 0x80) {
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return BPE__S;
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return BPE__L;
        if (cp >= '0' && cp <= '9') return BPE__N;
        return BPE__O;
    }
    if (cp < 0x100) {                                  /* Latin-1 supplement */
        if (cp == 0x85 || cp == 0xA0) return BPE__S;
        if (cp == 0xAA || cp == 0xB5 || cp == 0xBA) return BPE__L;  /* ª µ º */
        if (cp == 0xB2 || cp == 0xB3 || cp == 0xB9 || (cp >= 0xBC && cp <= 0xBE))
            return BPE__N;                                     /* ² ³ ¹ ¼ ½ ¾ */
        if (cp >= 0xC0 && cp != 0xD7 && cp != 0xF7) return BPE__L; /* À..ÿ */
        return BPE__O;                      /* C1 controls, ¡..¿ punctuation */
    }
    if ((cp >= 0x2C2 && cp <= 0x2C5) || (cp >= 0x2D2 && cp <= 0x2DF) ||
        (cp >= 0x2E5 && cp <= 0x2EB) || cp == 0x2ED || (cp >= 0x2EF && cp <= 0x36F))
        return BPE__O;          /* modifier symbols (Sk), combining marks (M) */
    if (cp == 0x375 || cp == 0x37E || cp == 0x384 || cp == 0x385 || cp == 0x387 ||
        cp == 0x3F6 || (cp >= 0x378 && cp <= 0x379) || (cp >= 0x380 && cp <= 0x383) ||
        cp == 0x38B || cp == 0x38D || cp == 0x3A2)
        return BPE__O;     /* Greek: signs, ; and · marks, unassigned points */
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
        cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000)
        return BPE__S;
    if (cp >= 0x200B && cp <= 0x206F) return BPE__O;   /* ‘ ’ “ ” – — … etc */
    if (cp >= 0x2070 && cp <= 0x209F) {                /* super/subscripts   */
        if (cp == 0x2071 || cp == 0x207F || (cp >= 0x2090 && cp <= 0x209C))
            return BPE__L;
        if (cp == 0x2070 || (cp >= 0x2074 && cp <= 0x2079) ||
            (cp >= 0x2080 && cp <= 0x2089)) return BPE__N;
        return BPE__O;
    }
    if (cp >= 0x20A0 && cp <= 0x20CF) return BPE__O;   /* currency: € ₹ ...  */
    if ((cp >= 0x2460 && cp <= 0x249B) || (cp >= 0x24EA && cp <= 0x24FF) ||
        (cp >= 0x2776 && cp <= 0x2793))
        return BPE__N;                  /* circled/parenthesised numbers (No) */
    if ((cp >= 0x2190 && cp <= 0x24E9) || (cp >= 0x2500 && cp <= 0x27BF))
        return BPE__O;                    /* arrows, math, box drawing, etc. */
    if (cp >= 0x3001 && cp <= 0x3004) return BPE__O;   /* 、。〃〄            */
    if ((cp >= 0xFE00 && cp <= 0xFE0F) || (cp >= 0x1F000 && cp <= 0x1FAFF))
        return BPE__O;                      /* variation selectors and emoji */
    return BPE__L;
}

/* class of the code point at s[i], and where the next one starts */
static int bpe__class_at(const unsigned char *s, size_t n, size_t i, size_t *next)
{
    size_t j = i;
    int c = bpe__class(bpe__utf8(s, n, &j));
    if (next) *next = j;
    return c;
}

/* ======================================================================== */
/* 3. pre-tokenizer                                                         */
/* ======================================================================== */
/* One match of the GPT-2 regex, tried at s[i] within [i, e), where e is the
   end of the current digit-free piece (it acts as end of string). Returns
   the end of the match. The alternatives, in the regex's order:
     's 't 're 've 'm 'll 'd      ASCII apostrophe, lower case only
      ?\p{L}+   ?\p{N}+           an optional U+0020 glues to the run after it
      ?[^\s\p{L}\p{N}]+           same, for a run of punctuation/symbols
     \s+(?!\S)                    whitespace not followed by a non-space: the
                                  whole run at the end, else all but its last
                                  character (which then glues to the word)
     \s+                          a single whitespace char before a non-space */
static size_t bpe__match(const unsigned char *s, size_t i, size_t e)
{
    size_t j, next, last;
    int c;

    if (s[i] == '\'' && i + 1 < e) {                   /* contractions       */
        unsigned char a = s[i + 1], b = i + 2 < e ? s[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
            return i + 3;
    }

    j = i;                                             /* " ?" then one run  */
    if (s[i] == ' ' && i + 1 < e && bpe__class_at(s, e, i + 1, NULL) != BPE__S) j = i + 1;
    c = bpe__class_at(s, e, j, &next);
    if (c != BPE__S) {
        while (next < e && bpe__class_at(s, e, next, &j) == c) next = j;
        return next;
    }

    last = i;                                          /* whitespace run     */
    for (j = i; j < e && bpe__class_at(s, e, j, &next) == BPE__S; j = next) last = j;
    if (j == e) return e;                   /* (?!\S) holds at end of string */
    return last > i ? last : j;             /* give back one char, or \s+    */
}

/* Calls fn(ctx, start, end) for every pre-token of s[0, n), in order: the
   text is cut before and after every numeric character (llama.cpp's first
   "smollm" regex, \p{N}), then each piece is split by bpe__match.           */
static int bpe__pretokenize(const unsigned char *s, size_t n,
                            int (*fn)(void *, size_t, size_t), void *ctx)
{
    size_t i = 0, e, p, q, next;
    while (i < n) {
        if (bpe__class_at(s, n, i, &next) == BPE__N) e = next;  /* one digit */
        else {
            e = next;
            while (e < n && bpe__class_at(s, n, e, &next) != BPE__N) e = next;
        }
        for (p = i; p < e; p = q) {
            q = bpe__match(s, p, e);
            if (fn(ctx, p, q)) return -1;
        }
        i = e;
    }
    return 0;
}

/* ======================================================================== */
/* 4. hash tables                                                           */
/* ======================================================================== */
/* Open addressing with linear probing; capacities are powers of two at
   least twice the entry count, so probes stay short and always end.         */
static uint64_t bpe__hash(const char *s, size_t n)             /* FNV-1a    */
{
    uint64_t h = 0xCBF29CE484222325ull;
    size_t i;
    for (i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001B3ull;
    return h ^ (h >> 29);
}

static size_t bpe__pow2(size_t n)
{
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
}

/* id of the token whose raw bytes are s[0, n), or -1 */
BPE_API int bpe_token_id(const bpe_tokenizer *t, const char *s, size_t n)
{
    size_t h;
    int id;
    if (!t || !t->tok_slot || (!s && n)) return -1;
    for (h = bpe__hash(s, n) & (t->tok_cap - 1); (id = t->tok_slot[h]) >= 0;
         h = (h + 1) & (t->tok_cap - 1))
        if ((size_t)t->len[id] == n && memcmp(t->bytes + t->off[id], s, n) == 0) return id;
    return -1;
}

static uint64_t bpe__pair_key(int l, int r) { return ((uint64_t)(uint32_t)l << 32) | (uint32_t)r; }
static size_t bpe__pair_slot(uint64_t key, size_t cap)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

/* the merge rule for ids (l, r), or NULL */
static const bpe__merge *bpe__merge_find(const bpe_tokenizer *t, int l, int r)
{
    uint64_t key = bpe__pair_key(l, r);
    size_t h = bpe__pair_slot(key, t->merge_cap);
    for (; t->merge_slot[h].key != UINT64_MAX; h = (h + 1) & (t->merge_cap - 1))
        if (t->merge_slot[h].key == key) return &t->merge_slot[h];
    return NULL;
}

/* ======================================================================== */
/* 5. build / free                                                          */
/* ======================================================================== */
BPE_API void bpe_free(bpe_tokenizer *t)
{
    if (!t) return;
    BPE_FREE(t->bytes); BPE_FREE(t->off); BPE_FREE(t->len); BPE_FREE(t->tok_slot);
    BPE_FREE(t->merge_slot); BPE_FREE(t->special); BPE_FREE(t->sym); BPE_FREE(t->heap);
    t->bytes = NULL; t->off = NULL; t->len = NULL; t->tok_slot = NULL;
    t->merge_slot = NULL; t->special = NULL; t->sym = NULL; t->heap = NULL;
    t->n_vocab = t->n_merges = t->n_special = 0;
    t->tok_cap = t->merge_cap = t->scratch_cap = 0;
}

static size_t bpe__strlen(const char *const *s, const int *lens, int i)
{
    return lens ? (size_t)(lens[i] < 0 ? 0 : lens[i]) : strlen(s[i]);
}

static int bpe__is_special(const int *types, int i)
{
    return types && (types[i] == BPE_TOKEN_CONTROL || types[i] == BPE_TOKEN_USER_DEFINED);
}

/* Stores every token's raw bytes and fills the token table. Normal tokens
   are un-mapped from the byte-to-unicode form; special ones (control, user
   defined) are literal text and kept as they are. A duplicate keeps its
   first id.                                                                 */
static int bpe__build_vocab(bpe_tokenizer *t, const char *const *tokens,
                            const int *token_lens, const int *types)
{
    size_t total = 0, at = 0;
    int i;
    for (i = 0; i < t->n_vocab; i++) {
        if (!tokens[i]) return bpe__fail(t, "bpe: token %d is NULL", i);
        total += bpe__strlen(tokens, token_lens, i);
    }
    t->bytes    = (char *)BPE_MALLOC(total ? total : 1);
    t->off      = (size_t *)BPE_MALLOC((size_t)t->n_vocab * sizeof *t->off);
    t->len      = (int *)BPE_MALLOC((size_t)t->n_vocab * sizeof *t->len);
    t->tok_cap  = bpe__pow2((size_t)t->n_vocab);
    t->tok_slot = (int *)BPE_MALLOC(t->tok_cap * sizeof *t->tok_slot);
    if (!t->bytes || !t->off || !t->len || !t->tok_slot)
        return bpe__fail(t, "bpe: out of memory (%d tokens)", t->n_vocab);
    memset(t->tok_slot, 0xFF, t->tok_cap * sizeof *t->tok_slot);  /* all -1 */

    for (i = 0; i < t->n_vocab; i++) {
        size_t n = bpe__strlen(tokens, token_lens, i), h;
        long m;
        t->off[i] = at;
        if (bpe__is_special(types, i)) { memcpy(t->bytes + at, tokens[i], n); m = (long)n; }
        else if ((m = bpe__unmap(t, tokens[i], n, t->bytes + at)) < 0)
            return bpe__fail(t, "bpe: token %d has a character outside the "
                             "byte-level alphabet", i);
        t->len[i] = (int)m;
        if (bpe_token_id(t, t->bytes + at, (size_t)m) < 0) {   /* not a dup */
            for (h = bpe__hash(t->bytes + at, (size_t)m) & (t->tok_cap - 1);
                 t->tok_slot[h] >= 0; h = (h + 1) & (t->tok_cap - 1)) {}
            t->tok_slot[h] = i;
        }
        at += (size_t)m;
    }
    for (i = 0; i < 256; i++) {
        char b = (char)i;
        t->byte_id[i] = bpe_token_id(t, &b, 1);
    }
    return 0;
}

/* Parses merges[r] = "left right" into the ids of left, right and their
   concatenation, and files them under rank r. All three must be tokens:
   Hugging Face refuses such a vocabulary too (MergeTokenOutOfVocabulary). */
static int bpe__build_merges(bpe_tokenizer *t, const char *const *merges,
                             const int *merge_lens)
{
    size_t maxlen = 0, n, sp;
    char *buf;
    int r;
    for (r = 0; r < t->n_merges; r++) {
        if (!merges[r]) return bpe__fail(t, "bpe: merge %d is NULL", r);
        n = bpe__strlen(merges, merge_lens, r);
        if (n > maxlen) maxlen = n;
    }
    t->merge_cap  = bpe__pow2((size_t)t->n_merges);
    t->merge_slot = (bpe__merge *)BPE_MALLOC(t->merge_cap * sizeof *t->merge_slot);
    buf = (char *)BPE_MALLOC(maxlen + 1);
    if (!t->merge_slot || !buf) {
        BPE_FREE(buf);
        return bpe__fail(t, "bpe: out of memory (%d merges)", t->n_merges);
    }
    for (n = 0; n < t->merge_cap; n++) t->merge_slot[n].key = UINT64_MAX;

    for (r = 0; r < t->n_merges; r++) {
        const char *m = merges[r];
        long la, lb;
        int a, b, ab;
        uint64_t key;
        size_t h;
        n = bpe__strlen(merges, merge_lens, r);
        for (sp = 0; sp < n && m[sp] != ' '; sp++) {}
        if (sp == 0 || sp + 1 >= n || memchr(m + sp + 1, ' ', n - sp - 1)) {
            BPE_FREE(buf);
            return bpe__fail(t, "bpe: merge %d is not \"left right\"", r);
        }
        /* un-map both halves into buf, back to back: buf = left ++ right   */
        la = bpe__unmap(t, m, sp, buf);
        lb = la < 0 ? -1 : bpe__unmap(t, m + sp + 1, n - sp - 1, buf + la);
        a  = la < 0 ? -1 : bpe_token_id(t, buf, (size_t)la);
        b  = lb < 0 ? -1 : bpe_token_id(t, buf + la, (size_t)lb);
        ab = (a < 0 || b < 0) ? -1 : bpe_token_id(t, buf, (size_t)(la + lb));
        if (ab < 0) {
            BPE_FREE(buf);
            return bpe__fail(t, "bpe: merge %d names a token that is not in "
                             "the vocabulary", r);
        }
        key = bpe__pair_key(a, b);
        for (h = bpe__pair_slot(key, t->merge_cap); t->merge_slot[h].key != UINT64_MAX &&
             t->merge_slot[h].key != key; h = (h + 1) & (t->merge_cap - 1)) {}
        if (t->merge_slot[h].key == key) continue;       /* first rank wins */
        t->merge_slot[h].key = key; t->merge_slot[h].rank = r; t->merge_slot[h].id = ab;
    }
    BPE_FREE(buf);
    return 0;
}

/* The special tokens, longest first, so that the first one matching at a
   position is the longest (Hugging Face matches added tokens leftmost-
   longest). Insertion sort: there are few.                                  */
static int bpe__build_specials(bpe_tokenizer *t, const int *types)
{
    int i, j, n = 0;
    memset(t->special_first, 0, sizeof t->special_first);
    for (i = 0; i < t->n_vocab; i++) n += bpe__is_special(types, i) && t->len[i] > 0;
    t->special = (int *)BPE_MALLOC((size_t)(n ? n : 1) * sizeof *t->special);
    if (!t->special) return bpe__fail(t, "bpe: out of memory (%d specials)", n);
    for (i = 0; i < t->n_vocab; i++) {
        if (!bpe__is_special(types, i) || t->len[i] == 0) continue;
        for (j = t->n_special; j > 0 && t->len[t->special[j - 1]] < t->len[i]; j--)
            t->special[j] = t->special[j - 1];
        t->special[j] = i;
        t->n_special++;
        t->special_first[(unsigned char)t->bytes[t->off[i]]] = 1;
    }
    return 0;
}

/* Builds the tokenizer. token_lens / merge_lens may be NULL (strings are
   then NUL-terminated); types may be NULL (no special tokens). Returns 0, or
   -1 with t->err set and nothing left allocated.                            */
BPE_API int bpe_init(bpe_tokenizer *t, const char *const *tokens, const int *token_lens,
                     int n_tokens, const char *const *merges, const int *merge_lens,
                     int n_merges, const int *types)
{
    if (!t) return -1;
    memset(t, 0, sizeof *t);
    bpe__byte_map(t);
    if (!tokens || n_tokens <= 0)
        return bpe__fail(t, "bpe: no tokens (n = %d)", n_tokens);
    if (n_merges < 0 || (n_merges > 0 && !merges))
        return bpe__fail(t, "bpe: bad merges (n = %d)", n_merges);
    t->n_vocab = n_tokens;
    t->n_merges = n_merges;
    if (bpe__build_vocab(t, tokens, token_lens, types) ||
        bpe__build_merges(t, merges, merge_lens) ||
        bpe__build_specials(t, types)) {
        char why[sizeof t->err];
        memcpy(why, t->err, sizeof why);
        bpe_free(t);
        memcpy(t->err, why, sizeof why);
        return -1;
    }
    return 0;
}

/* ======================================================================== */
/* 6. BPE merge (Sennrich et al. 2016; GPT-2's byte-level variant)          */
/* ======================================================================== */
/* A pre-token starts as one symbol per byte. Repeatedly, the adjacent pair
   with the lowest merge rank is replaced by its merged token; on equal
   ranks the leftmost goes first (the order Hugging Face and llama.cpp use).
   A binary heap holds the candidate pairs; a candidate is stale, and
   skipped, once either symbol has changed, so each merge costs O(log n)
   instead of a rescan of the word.                                          */
static int bpe__cand_less(const bpe__cand *a, const bpe__cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void bpe__heap_push(bpe__cand *h, size_t *n, bpe__cand c)
{
    size_t i = (*n)++;
    while (i > 0 && bpe__cand_less(&c, &h[(i - 1) / 2])) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = c;
}

static bpe__cand bpe__heap_pop(bpe__cand *h, size_t *n)
{
    bpe__cand top = h[0], last = h[--(*n)];
    size_t i = 0, k;
    while ((k = 2 * i + 1) < *n) {
        if (k + 1 < *n && bpe__cand_less(&h[k + 1], &h[k])) k++;
        if (!bpe__cand_less(&h[k], &last)) break;
        h[i] = h[k]; i = k;
    }
    h[i] = last;
    return top;
}

/* queue the pair (symbol l, symbol r) if some merge rule joins their ids */
static void bpe__offer(const bpe_tokenizer *t, size_t *nh, int l, int r)
{
    const bpe__merge *m = bpe__merge_find(t, t->sym[l].id, t->sym[r].id);
    bpe__cand c;
    if (!m) return;
    c.rank = m->rank; c.left = l; c.right = r;
    c.lid = t->sym[l].id; c.rid = t->sym[r].id; c.id = m->id;
    bpe__heap_push(t->heap, nh, c);
}

static int bpe__grow(bpe_tokenizer *t, size_t n)
{
    bpe__sym *s;
    bpe__cand *h;
    size_t cap = t->scratch_cap ? t->scratch_cap : 64;
    if (n <= t->scratch_cap) return 0;
    while (cap < n) cap *= 2;
    s = (bpe__sym *)BPE_REALLOC(t->sym, cap * sizeof *s);
    if (!s) return bpe__fail(t, "bpe: out of memory (%lu symbols)", (unsigned long)n);
    t->sym = s;
    h = (bpe__cand *)BPE_REALLOC(t->heap, 3 * cap * sizeof *h);
    if (!h) return bpe__fail(t, "bpe: out of memory (%lu symbols)", (unsigned long)n);
    t->heap = h;
    t->scratch_cap = cap;
    return 0;
}

typedef struct {            /* where bpe_encode's output goes               */
    bpe_tokenizer *t;
    const unsigned char *text;
    int   *ids;             /* (cap) caller's buffer                        */
    size_t cap;
    long   n;               /* ids produced so far (may exceed cap)         */
} bpe__out;

static void bpe__emit(bpe__out *o, int id)
{
    if ((size_t)o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* BPE-encodes the pre-token text[a, b) and appends its ids. */
static int bpe__word(void *ctx, size_t a, size_t b)
{
    bpe__out *o = (bpe__out *)ctx;
    bpe_tokenizer *t = o->t;
    size_t i, nh = 0;
    int n = 0, k;

    if (bpe__grow(t, b - a)) return -1;
    for (i = a; i < b; i++) {                  /* one symbol per known byte */
        int id = t->byte_id[o->text[i]];
        if (id < 0) { t->dropped++; continue; }
        t->sym[n].id = id; t->sym[n].prev = n - 1; t->sym[n].next = n + 1;
        n++;
    }
    if (n == 0) return 0;
    t->sym[n - 1].next = -1;
    for (k = 0; k + 1 < n; k++) bpe__offer(t, &nh, k, k + 1);

    while (nh > 0) {
        bpe__cand c = bpe__heap_pop(t->heap, &nh);
        bpe__sym *l = &t->sym[c.left], *r = &t->sym[c.right];
        if (l->id != c.lid || r->id != c.rid || l->next != c.right) continue;  /* stale */
        l->id = c.id;                          /* r folds into l            */
        r->id = -1;
        l->next = r->next;
        if (l->next >= 0) t->sym[l->next].prev = c.left;
        if (l->prev >= 0) bpe__offer(t, &nh, l->prev, c.left);
        if (l->next >= 0) bpe__offer(t, &nh, c.left, l->next);
    }
    for (k = 0; k >= 0; k = t->sym[k].next) bpe__emit(o, t->sym[k].id);
    return 0;
}

/* ======================================================================== */
/* 7. encode / decode                                                       */
/* ======================================================================== */
/* the longest special token starting at s[i], or -1 */
static int bpe__special_at(const bpe_tokenizer *t, const unsigned char *s, size_t n, size_t i)
{
    int k;
    if (!t->special_first[s[i]]) return -1;
    for (k = 0; k < t->n_special; k++) {
        int id = t->special[k];
        size_t L = (size_t)t->len[id];
        if (L <= n - i && memcmp(s + i, t->bytes + t->off[id], L) == 0) return id;
    }
    return -1;
}

/* pre-tokenizes and encodes text[a, b), a stretch free of special tokens;
   bpe__word's offsets are relative to the stretch, hence the moved base     */
static int bpe__fragment(bpe__out *o, const char *text, size_t a, size_t b)
{
    o->text = (const unsigned char *)text + a;
    return bpe__pretokenize(o->text, b - a, bpe__word, o);
}

/* Encodes text[0, len) into ids. With flags & BPE_SPECIAL, special tokens
   written in the text become single ids, and the text between them is
   pre-tokenized on its own (as Hugging Face does for added tokens).
   Like snprintf: writes at most cap ids and returns how many the whole text
   needs (never more than len), or -1 on error (t->err says why). An empty
   text gives 0 ids.                                                         */
BPE_API long bpe_encode(bpe_tokenizer *t, const char *text, size_t len, int flags,
                        int *ids, size_t cap)
{
    bpe__out o;
    size_t i, start = 0;
    if (!t) return -1;
    if (!t->tok_slot) return bpe__fail(t, "bpe: tokenizer not initialised");
    if (!text) return bpe__fail(t, "bpe: text is NULL");
    if (!ids && cap) return bpe__fail(t, "bpe: ids is NULL but cap = %lu", (unsigned long)cap);
    o.t = t; o.text = (const unsigned char *)text; o.ids = ids; o.cap = cap; o.n = 0;
    t->dropped = 0;
    for (i = 0; (flags & BPE_SPECIAL) && i < len; i++) {
        int id = bpe__special_at(t, (const unsigned char *)text, len, i);
        if (id < 0) continue;
        if (bpe__fragment(&o, text, start, i)) return -1;
        bpe__emit(&o, id);
        start = i + (size_t)t->len[id];
        i = start - 1;
    }
    if (bpe__fragment(&o, text, start, len)) return -1;
    return o.n;
}

/* The raw bytes of token id (not NUL-terminated) and their count in *len;
   NULL for an id outside the vocabulary.                                    */
BPE_API const char *bpe_token_bytes(const bpe_tokenizer *t, int id, size_t *len)
{
    if (!t || !t->bytes || id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = (size_t)t->len[id];
    return t->bytes + t->off[id];
}

/* Concatenates the raw bytes of ids[0, n) into out, like snprintf: writes at
   most cap - 1 bytes plus a NUL, returns the full byte count, or -1 for a
   bad id. Special tokens decode to their literal text.                      */
BPE_API long bpe_decode(bpe_tokenizer *t, const int *ids, size_t n, char *out, size_t cap)
{
    size_t i, total = 0, L;
    if (!t) return -1;
    if ((!ids && n) || (!out && cap)) return bpe__fail(t, "bpe: NULL buffer");
    for (i = 0; i < n; i++) {
        const char *b = bpe_token_bytes(t, ids[i], &L);
        if (!b) return bpe__fail(t, "bpe: token id %d is outside the vocabulary", ids[i]);
        if (total < cap) memcpy(out + total, b, total + L < cap ? L : cap - 1 - total);
        total += L;
    }
    if (cap) out[total < cap ? total : cap - 1] = '\0';
    return (long)total;
}

#endif /* KVQ_EXAMPLES_BPE_H */

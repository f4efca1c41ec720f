/*
 * IR helpers that both the library and a backend module link (a module cannot reach the
 * library's hidden symbols, so these objects go into both): fp16 / bf16 conversion, op and
 * activation names, error formatting, a variable-length batch's token check, adding a batch's
 * per-op times (options.profile).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "model_impl.h"
#include "profile.h"

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t gp__f32_to_f16(float f) {
    uint32_t x = f2u(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) /* inf or NaN (quiet, payload kept non-zero) */
        return (uint16_t)(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u | ((ax >> 13) & 0x3FFu) : 0));
    if (ax >= 0x477FF000u) /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7C00u);
    if (ax < 0x38800000u) {   /* below the smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) /* < 2^-25: rounds to zero */
            return (uint16_t)sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
        /* value = m * 2^(e - 150); the half subnormal unit is 2^-24, so q = m >> (126 - e),
           shift in [14, 24]; rounding up may carry into the smallest normal, as it should */
        uint32_t shift = 126u - e;
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even */
    uint32_t r = ax - 0x38000000u; /* exponent 127 -> 15 */
    uint32_t q = r >> 13;
    uint32_t rem = r & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
        q++; /* may carry into the exponent, correctly producing the next binade or inf */
    return (uint16_t)(sign | q);
}

float gp__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    if (e == 0x1F) return u2f(sign | 0x7F800000u | (m << 13));
    if (e == 0) {
        if (m == 0) return u2f(sign);
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t gp__f32_to_bf16(float f) {
    uint32_t x = f2u(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7FFFu + lsb;
    return (uint16_t)(x >> 16);
}

float gp__bf16_to_f32(uint16_t h) {
    return u2f((uint32_t)h << 16);
}

int gp__errf(gp__err *e, int code, const char *fmt, ...) {
    if (e && e->buf && e->len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->buf, e->len, fmt, ap);
        va_end(ap);
    }
    return code;
}

int gp__token_offsets(const gp__model *m, size_t n, const uint64_t *off, int64_t *tok,
                      size_t *longest, gp__err *e) {
    size_t most = 0, total = 0;
    if (tok) tok[0] = 0;
    for (size_t k = 0; k < n; k++) {
        if (off[k + 1] < off[k])
            return gp__errf(e, GP_EINVAL, "item %zu's offsets decrease: %llu, then %llu", k,
                            (unsigned long long)off[k], (unsigned long long)off[k + 1]);
        uint64_t len = off[k + 1] - off[k];
        if (len == 0 || len % m->token_bytes || len / m->token_bytes > m->max_tokens)
            return gp__errf(e, GP_EINVAL,
                            "item %zu has %llu bytes: not 1..%zu whole tokens of %zu bytes", k,
                            (unsigned long long)len, m->max_tokens, m->token_bytes);
        size_t t = (size_t)(len / m->token_bytes);
        total += t;
        if (tok) tok[k + 1] = (int64_t)total;
        if (t > most) most = t;
    }
    if (longest) *longest = most;
    return GP_OK;
}

void gp__shape_str(gp__shape s, char *buf, size_t len) {
    if (s.rank == 1)
        snprintf(buf, len, s.tokens ? "*x%d" : "%d", s.c);
    else
        snprintf(buf, len, "%dx%dx%d", s.c, s.h, s.w);
}

const char *gp__op_name(gp__op_kind k) {
    static const char *const names[GP__OP_COUNT_] = {
#define GP__OP_NAME(kind, name) name,
        GP__OP_LIST(GP__OP_NAME)
#undef GP__OP_NAME
    };
    return (unsigned)k < GP__OP_COUNT_ ? names[k] : "?";
}

const char *gp__act_name(gp__act a) {
    switch (a) {
    case GP__ACT_NONE:
        return "none";
    case GP__ACT_RELU:
        return "relu";
    case GP__ACT_GELU:
        return "gelu";
    case GP__ACT_SIGMOID:
        return "sigmoid";
    case GP__ACT_TANH:
        return "tanh";
    }
    return "?";
}

/* ---- per-op time (options.profile; profile.h) ---------------------------------------------- */

void gp__prof_batch(gp__model *m, const uint64_t *ns, size_t items) {
    struct gp__prof *p = m->prof;
    /* A lock that fails (a default mutex does not) leaves the batch uncounted: timing never
       fails a batch. */
    if (!p || pthread_mutex_lock(&p->mu) != 0) return;
    for (int i = 0; i < p->n; i++)
        p->ns[i] += ns[i];
    p->batches++;
    p->items += items;
    pthread_mutex_unlock(&p->mu);
}

void gp__prof_untimed(gp__model *m) {
    struct gp__prof *p = m->prof;
    if (!p || pthread_mutex_lock(&p->mu) != 0) return;
    p->untimed++;
    pthread_mutex_unlock(&p->mu);
}

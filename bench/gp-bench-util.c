/*
 * gp-bench's own helpers, so the tool needs nothing but the public headers: a latency
 * histogram for the naive baseline (the pipeline's latencies come from its own stats), and
 * JSON string escaping.
 */
#include <stdlib.h>

#include "gp-bench.h"

/* Log-linear buckets: GB_HIST_SUB per power of two, so a bucket is at most 1/16 wide. */
static unsigned hist_index(uint64_t v) {
    if (v < GB_HIST_SUB) return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    return (msb - 3u) * GB_HIST_SUB + (unsigned)((v >> (msb - 4u)) & (GB_HIST_SUB - 1));
}

static uint64_t bucket_low(unsigned i) {
    if (i < GB_HIST_SUB) return i;
    unsigned msb = i / GB_HIST_SUB + 3u;
    return (uint64_t)(GB_HIST_SUB + i % GB_HIST_SUB) << (msb - 4u);
}

void gb_hist_add(gb_hist *h, uint64_t ns) {
    h->b[hist_index(ns)]++;
    h->n++;
}

uint64_t gb_hist_quantile(const gb_hist *h, double q) {
    if (h->n == 0) return 0;
    if (q < 0) q = 0;
    if (q > 1) q = 1;
    uint64_t rank = (uint64_t)(q * (double)(h->n - 1)) + 1, seen = 0;
    for (unsigned i = 0; i < GB_HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) { /* the bucket's midpoint */
            uint64_t width = i < GB_HIST_SUB ? 1 : UINT64_C(1) << (i / GB_HIST_SUB - 1u);
            return bucket_low(i) + width / 2;
        }
    }
    return 0;
}

void gb_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
    fputc('"', f);
}

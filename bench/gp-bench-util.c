/*
 * gp-bench's own helpers, so the tool needs nothing but the public headers: a latency
 * histogram for the naive baseline (the pipeline's latencies come from its own stats), JSON
 * string escaping, the token-count distributions of variable-size items, and the output
 * paths' check before a run (gp-infer uses it too).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

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

size_t gb_utf8_len(const unsigned char *s) {
    if (s[0] < 0x80) return 1;
    size_t n = s[0] >= 0xC2 && s[0] <= 0xDF   ? 2
               : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
               : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4
                                              : 0;
    for (size_t k = 1; k < n; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    /* overlong 3- and 4-byte forms, surrogates, past U+10FFFF */
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0) ||
        (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))
        return 0;
    return n;
}

void gb_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c;) {
        size_t n = gb_utf8_len(c);
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else if (n == 0)
            fputs("\\ufffd", f);
        else
            fwrite(c, 1, n, f);
        c += n ? n : 1;
    }
    fputc('"', f);
}

/* ---- token counts ----------------------------------------------------------------------- */

const char *gb_packing_name(gb_packing p) {
    switch (p) {
    case GB_PACKED:
        return "packed";
    case GB_PADDED:
        return "padded";
    case GB_PADMAX:
        return "padmax";
    default:
        return "fixed";
    }
}

/* Comma-separated numbers after "name:"; the count read, or -1 on anything else. */
static int numbers(const char *s, double *v, int max) {
    int n = 0;
    for (;;) {
        char *end;
        errno = 0;
        if (n == max) return -1;
        v[n] = strtod(s, &end);
        if (errno || end == s || !isfinite(v[n])) return -1;
        n++;
        if (*end == '\0') return n;
        if (*end != ',') return -1;
        s = end + 1;
    }
}

static int whole(double v, uint32_t *out) {
    if (v < 1 || v > GB_MAX_TOKENS || v != floor(v)) return -1;
    *out = (uint32_t)v;
    return 0;
}

int gb_lengths_parse(const char *s, gb_lengths *l, char *why, size_t len) {
    memset(l, 0, sizeof *l);
    snprintf(l->spec, sizeof l->spec, "%s", s);
    double v[5];
    int n;
    if (!strcmp(s, "fixed")) {
        l->kind = GB_LEN_NONE;
        return 0;
    }
    if (!strncmp(s, "fixed:", 6)) {
        if (numbers(s + 6, v, 5) != 1 || whole(v[0], &l->lo)) {
            snprintf(why, len, "expected fixed:N, N tokens in 1..%u", GB_MAX_TOKENS);
            return -1;
        }
        l->kind = GB_LEN_FIXED;
        l->hi = l->lo;
        return 0;
    }
    if (!strncmp(s, "uniform:", 8)) {
        if (numbers(s + 8, v, 5) != 2 || whole(v[0], &l->lo) || whole(v[1], &l->hi) ||
            l->lo > l->hi) {
            snprintf(why, len, "expected uniform:A,B, whole token counts 1 <= A <= B <= %u",
                     GB_MAX_TOKENS);
            return -1;
        }
        l->kind = GB_LEN_UNIFORM;
        return 0;
    }
    if (!strncmp(s, "lognormal:", 10)) {
        if ((n = numbers(s + 10, v, 5)) != 4 || whole(v[2], &l->lo) || whole(v[3], &l->hi) ||
            l->lo > l->hi || v[0] < -10 || v[0] > 20 || !(v[1] > 0) || v[1] > 10) {
            snprintf(why, len,
                     "expected lognormal:MU,SIGMA,A,B: the token count is exp(MU + SIGMA * Z), "
                     "Z standard normal (MU in -10..20, SIGMA in (0, 10]), rounded and clipped "
                     "to [A, B], whole counts 1 <= A <= B <= %u; e.g. lognormal:4.5,0.9,8,512",
                     GB_MAX_TOKENS);
            return -1;
        }
        l->kind = GB_LEN_LOGNORMAL;
        l->mu = v[0];
        l->sigma = v[1];
        return 0;
    }
    snprintf(why, len,
             "expected fixed, fixed:N, uniform:A,B or lognormal:MU,SIGMA,A,B (token counts)");
    return -1;
}

/* splitmix64: a 64-bit hash of the item number. */
static uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15u;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* In (0, 1). */
static double unit(uint64_t z) {
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

uint32_t gb_lengths_draw(const gb_lengths *l, uint64_t i) {
    const uint64_t seed = 0x6C656E6774687321u; /* one sequence of lengths for every run */
    switch (l->kind) {
    case GB_LEN_FIXED:
        return l->lo;
    case GB_LEN_UNIFORM:
        return l->lo + (uint32_t)(mix(seed ^ i) % ((uint64_t)l->hi - l->lo + 1));
    case GB_LEN_LOGNORMAL: {
        /* Box-Muller from two hashes of i. */
        double u1 = unit(mix(seed ^ (2 * i))), u2 = unit(mix(seed ^ (2 * i + 1)));
        double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        double x = round(exp(l->mu + l->sigma * z));
        return x < l->lo ? l->lo : x > l->hi ? l->hi : (uint32_t)x;
    }
    default:
        return 0;
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

void gb_lengths_stats(const gb_lengths *l, double *mean, uint32_t *p50, uint32_t *p99) {
    *mean = 0;
    *p50 = *p99 = 0;
    if (l->kind == GB_LEN_NONE) return;
    uint32_t *v = malloc(GB_LEN_SAMPLE * sizeof *v);
    double sum = 0;
    for (uint64_t i = 0; i < GB_LEN_SAMPLE; i++) {
        uint32_t t = gb_lengths_draw(l, i);
        sum += t;
        if (v) v[i] = t;
    }
    *mean = sum / GB_LEN_SAMPLE;
    if (!v) return; /* no memory for the percentiles: they stay 0 */
    qsort(v, GB_LEN_SAMPLE, sizeof *v, cmp_u32);
    *p50 = v[GB_LEN_SAMPLE / 2];
    *p99 = v[GB_LEN_SAMPLE * 99 / 100];
    free(v);
}

/* 0 when `path` can be written, else -1 and why. */
static int gb_check_writable(const char *path, char *why, size_t len) {
    struct stat st;
    if (!*path) {
        snprintf(why, len, "'': an empty path");
        return -1;
    }
    if (stat(path, &st) == 0) { /* it exists: it must be a file we may write */
        if (S_ISDIR(st.st_mode)) {
            snprintf(why, len, "%s is a directory", path);
            return -1;
        }
        if (faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) != 0) {
            snprintf(why, len, "%s: %s", path, strerror(errno));
            return -1;
        }
        return 0;
    }
    if (errno != ENOENT) {
        snprintf(why, len, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (lstat(path, &st) == 0) { /* a link to nothing: fopen would follow it */
        snprintf(why, len, "%s is a symbolic link to a missing file", path);
        return -1;
    }
    /* A new file: its directory must exist and take it. */
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (slash && (size_t)(slash - path) >= sizeof dir) {
        snprintf(why, len, "%s: the path is too long", path);
        return -1;
    }
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, len, "%s: no directory %s", path, dir);
        return -1;
    }
    if (faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) != 0) {
        snprintf(why, len, "%s: directory %s: %s", path, dir, strerror(errno));
        return -1;
    }
    return 0;
}

int gb_stdout_checked(const char *tool, int rc) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "%s: standard output: a write failed: %s\n", tool,
                strerror(errno ? errno : EIO));
        if (rc == 0) rc = 1;
    }
    return rc;
}

int gb_is_option(const char *arg) {
    return arg[0] == '-' &&
           (arg[1] == '-' || (arg[1] >= 'a' && arg[1] <= 'z') || (arg[1] >= 'A' && arg[1] <= 'Z'));
}

/* The same regular file (by name, or device and inode: another spelling, a link); /dev/null
   and other devices are shared by design. */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    int a_exists = stat(a, &sa) == 0;
    if (a_exists && !S_ISREG(sa.st_mode)) return 0;
    return !strcmp(a, b) || (a_exists && stat(b, &sb) == 0 && S_ISREG(sb.st_mode) &&
                             sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino);
}

int gb_check_distinct(const char *tool, const char *const (*outputs)[2], size_t nout,
                      const char *const (*inputs)[2], size_t nin) {
    for (size_t i = 0; i < nout; i++) {
        const char *p = outputs[i][1];
        if (!p) continue;
        for (size_t j = 0; j < nout + nin; j++) {
            const char *const *o = j < nout ? outputs[j] : inputs[j - nout];
            if ((j < nout && j <= i) || !o[1] || !same_file(p, o[1])) continue;
            fprintf(stderr, "%s: %s %s: also %s's file%s\n", tool, outputs[i][0], p, o[0],
                    j < nout ? " (one would overwrite the other)" : " (it would be overwritten)");
            return -1;
        }
    }
    return 0;
}

int gb_close_output(FILE *f, const char *path, int *removed) {
    int e = f ? 0 : (errno ? errno : EIO);
    if (f) {
        /* ferror: an earlier buffer flush failed (its error is not repeated by fclose). */
        int bad = fflush(f) != 0 || ferror(f);
        if (bad) e = errno ? errno : EIO;
        if (fclose(f) != 0 && !bad) e = errno ? errno : EIO;
    }
    *removed = 0;
    if (!e) return 0;
    struct stat st; /* a regular file, not a device, FIFO or a link's target */
    *removed = f && lstat(path, &st) == 0 && S_ISREG(st.st_mode) && unlink(path) == 0;
    errno = e;
    return -1;
}

int gb_check_outputs(const char *tool, const char *const (*outputs)[2], size_t n) {
    for (size_t i = 0; i < n; i++) {
        char why[8192]; /* a path and its directory, up to PATH_MAX each */
        if (outputs[i][1] && gb_check_writable(outputs[i][1], why, sizeof why) != 0) {
            fprintf(stderr, "%s: %s %s\n", tool, outputs[i][0], why);
            return -1;
        }
    }
    return 0;
}

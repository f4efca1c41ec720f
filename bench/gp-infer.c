/*
 * gp-infer: run a model on every item of an .npy file through a gpupipe pipeline, write the
 * outputs as .npy.
 *
 *   gp-infer --model M.safetensors [--spec FILE] --input X.npy [--lengths L.npy] --output Y.npy
 *            [--backend auto|host|cuda] [--batch N] [--inflight K] [--producers P]
 *            [--max-delay-us US] [--max-tokens T]
 *            [--precision fp32|tf32|fp16|bf16] [--cuda-graphs] [--describe]
 *            [--capacity C] [--repeat R] [--windows K] [--warmup W] [--report R.json]
 *            [--profile] [--quiet] [--log error|warn|info]
 *   gp-infer --demo mlp|cnn|encoder [--save-demo FILE] [--input X.npy --output Y.npy] ...
 *
 * X holds N items: shape (N, *item shape), dtype as the model's input (f32 '<f4', u8 '|u1').
 * A variable-length model (token ids, `input i32 *`, or tokens, `input f32 *xF`) takes its
 * items packed: X holds every item's tokens back to back (ids: shape (T,), dtype '<i4', '<i8'
 * or '<u4' as the model's input; f32 tokens: shape (T, F)), and L.npy (int64 or int32, shape
 * (N,)) says how many tokens each item has (sum = T).
 * Y gets shape (N, *output shape), f32 '<f4' or i64 '<i8'. C order, little-endian.
 * Timing: items/s is N x R (--repeat) submissions over first submit to drained; every item's
 * latency is its submit call to its callback (gp_now_ns(), CLOCK_MONOTONIC), p50/p99 nearest rank.
 * --windows K times K such windows back to back in one process (one pipeline) and reports their
 * median items/s (K even: the mean of the middle two), each window's figure beside it; the
 * latencies and the report's counters then cover every window (a shared machine's one slow
 * window does not become the figure: bench/model-bench.py takes its medians this way).
 * --warmup W submits W items (the input's first, cycling) and drains them before the first
 * window, so a short run does not time a fresh process's first batches (lazily loaded kernels,
 * first library calls); the report's counters then cover the windows alone.
 * --report writes both, the windows' ends on that clock (first start, last end: to line up
 * samples taken beside the run), each window's items/s (window_items_per_s; items and seconds
 * are one window's at the median rate) and the pipeline's busy time per stage (gp_stats
 * h2d/compute/d2h_busy_ns: on CUDA, compute_busy_ns / batches is the device's compute time per
 * batch under load), as JSON. Exit
 * status: 0 ok; 1 a run-time failure; 2 usage (also an --output, --report or --save-demo path
 * that cannot be written, found before the run, --max-tokens for a fixed-size model, and options
 * the pipeline's config refuses, such as --capacity 12); 3 bad
 * model or input file (shape/dtype mismatch, missing tensor, ...); 4 the requested backend is not
 * usable here.
 * --profile loads the model with options.profile and, after the run, prints its per-op time
 * over the timed windows (gp_model_profile: ms per batch and share of each op) to stdout; the
 * warm-up's batches are left out (gp_model_profile_reset). On CUDA an op's time is its slot's
 * stream's: with --inflight 1 each op's own, with more, shared with the other slots' work;
 * with --cuda-graphs replayed batches are not timed.
 * --log L prints the pipeline's log lines at level L and above to stderr, each as
 * "gp-infer: log LEVEL: message" (info: what the CUDA model chose at create, such as each
 * convolution's timed algorithm per batch size; default: none).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gpupipe/gpupipe.h>
#include <gpupipe/model.h>

#include "gp-bench.h" /* gb_check_outputs (gp-bench-util.c) */

enum { EXIT_RUN = 1, EXIT_USAGE = 2, EXIT_INPUT = 3, EXIT_NODEV = 4 };

/* ---- .npy (format versions 1-3; C order; little-endian f4, u1, i8, i4) ------------------ */
/* npy_read returns 0, -1 (bad file), or -2 (a dtype it does not read; the caller, knowing
   what the model takes, says how to convert). */

typedef struct npy {
    char descr[8]; /* "<f4", "|u1", "<i8", "<i4" */
    int rank;
    int64_t shape[8];
    size_t elem, count; /* element size, element count */
    void *data;
} npy;

static const struct {
    const char *descr, *alt;
    gp_dtype dtype;
} npy_types[] = {{"<f4", "<f4", GP_DTYPE_F32},
                 {"|u1", "<u1", GP_DTYPE_U8},
                 {"<i8", "<i8", GP_DTYPE_I64},
                 {"<i4", "<i4", GP_DTYPE_I32},
                 {"<u4", "<u4", GP_DTYPE_U32}};

static int npy_dtype(const char *descr, gp_dtype *t) {
    /* '=': the writer's native order; this program runs little-endian hosts only. */
    char d[8];
    snprintf(d, sizeof d, "%s", descr);
    if (d[0] == '=') d[0] = d[1] == 'u' && d[2] == '1' && !d[3] ? '|' : '<';
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (!strcmp(d, npy_types[i].descr) || !strcmp(d, npy_types[i].alt)) {
            *t = npy_types[i].dtype;
            return 1;
        }
    return 0;
}

/* NumPy's name for a descr ("<f8" -> "float64"), for messages; "" for a kind it does not
   know (the message then shows the descr alone). */
static void npy_type_name(const char *descr, char *buf, size_t len) {
    /* kinds with a size in bytes, then kinds named whole */
    const char *sized = "f"
                        "float\0"
                        "i"
                        "int\0"
                        "u"
                        "uint\0"
                        "c"
                        "complex\0",
               *named = "b"
                        "bool\0"
                        "O"
                        "object\0"
                        "U"
                        "str (unicode)\0"
                        "S"
                        "bytes\0"
                        "V"
                        "void (raw records)\0"
                        "M"
                        "datetime64\0"
                        "m"
                        "timedelta64\0";
    char k = descr[0] ? descr[1] : 0;
    long bytes = k ? strtol(descr + 2, NULL, 10) : 0;
    for (const char *p = sized; *p; p += strlen(p) + 1)
        if (*p == k) {
            snprintf(buf, len, "%s%s%ld", descr[0] == '>' ? "big-endian " : "", p + 1, bytes * 8);
            return;
        }
    for (const char *p = named; *p; p += strlen(p) + 1)
        if (*p == k) {
            snprintf(buf, len, "%s", p + 1);
            return;
        }
    snprintf(buf, len, "%s", "");
}

/* How to turn an array into what the model takes, as NumPy code. */
static const char *npy_fix(gp_dtype want) {
    switch (want) {
    case GP_DTYPE_U8:
        return "x.astype(np.uint8) (raw pixels 0..255: the model normalizes them itself, so pass "
               "the images before any normalization)";
    case GP_DTYPE_I32:
        return "x.astype(np.int32)";
    case GP_DTYPE_I64:
        return "x.astype(np.int64)";
    case GP_DTYPE_U32:
        return "x.astype(np.uint32)";
    default:
        return "x.astype(np.float32)";
    }
}

/* Whether the header text at p is the Python literal w (followed by ',', ' ' or '}'). */
static int npy_word(const char *p, const char *w) {
    size_t n = strlen(w);
    return !strncmp(p, w, n) && (p[n] == ',' || p[n] == ' ' || p[n] == '}');
}

static const char *skip_ws(const char *p) {
    while (*p == ' ')
        p++;
    return p;
}

/* Parse the header dict {'descr': '<f4', 'fortran_order': False, 'shape': (N, ...), }. */
static int npy_parse_header(const char *h, npy *a, char *err, size_t len) {
    const char *d = strstr(h, "'descr':"), *f = strstr(h, "'fortran_order':"),
               *s = strstr(h, "'shape':");
    if (!d || !f || !s) return snprintf(err, len, "header lacks descr, fortran_order or shape"), -1;
    d = skip_ws(d + 8);
    if (*d == '[')
        return snprintf(err, len,
                        "a structured dtype (named fields): gp-infer reads plain numeric "
                        "arrays"),
               -2;
    if (*d != '\'') return snprintf(err, len, "bad descr"), -1;
    const char *e = strchr(d + 1, '\'');
    if (!e || e - d - 1 >= (long)sizeof a->descr)
        return snprintf(err, len, "unsupported descr"), -1;
    memcpy(a->descr, d + 1, (size_t)(e - d - 1));
    a->descr[e - d - 1] = '\0';
    gp_dtype t;
    if (!npy_dtype(a->descr, &t)) {
        char name[32];
        npy_type_name(a->descr, name, sizeof name);
        if (!name[0])
            return snprintf(err, len, "dtype '%s' is not one gp-infer reads", a->descr), -2;
        return snprintf(err, len, "dtype %s ('%s') is not one gp-infer reads", name, a->descr), -2;
    }
    a->elem = gp_dtype_size(t);
    f = skip_ws(f + 16);
    if (npy_word(f, "True"))
        return snprintf(err, len,
                        "Fortran-order array: save a C-order copy, np.save(path, "
                        "np.ascontiguousarray(x))"),
               -1;
    if (!npy_word(f, "False")) return snprintf(err, len, "bad fortran_order (True or False)"), -1;
    s = skip_ws(s + 8);
    if (*s != '(') return snprintf(err, len, "bad shape"), -1;
    s++;
    a->rank = 0;
    a->count = 1;
    int huge = 0;
    for (;;) {
        s = skip_ws(s);
        if (*s == ')') break;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || errno || v < 0 || a->rank == 8) return snprintf(err, len, "bad shape"), -1;
        a->shape[a->rank++] = v;
        if ((size_t)v && a->count > SIZE_MAX / 16 / (size_t)v)
            huge = 1; /* too large, unless a later dimension is 0 */
        else
            a->count *= (size_t)v;
        s = skip_ws(end);
        if (*s == ',')
            s++;
        else if (*s != ')')
            return snprintf(err, len, "bad shape"), -1;
    }
    if (huge && a->count) return snprintf(err, len, "shape too large"), -1;
    return 0;
}

static int npy_read(const char *path, npy *a, char *err, size_t len) {
    memset(a, 0, sizeof *a);
    FILE *fp = fopen(path, "rb");
    if (!fp) return snprintf(err, len, "cannot open: %s", strerror(errno)), -1;
    unsigned char pre[12];
    int rc = -1;
    char *hdr = NULL;
    size_t got = fread(pre, 1, 10, fp);
    if (got != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        struct stat ds;
        if (fstat(fileno(fp), &ds) == 0 && S_ISDIR(ds.st_mode))
            snprintf(err, len, "is a directory");
        else if (got == 0 && !ferror(fp))
            snprintf(err, len, "an empty file, not an .npy file");
        else
            snprintf(err, len, "not an .npy file");
        goto out;
    }
    size_t hlen;
    if (pre[6] == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, fp) != 2) {
            snprintf(err, len, "truncated header");
            goto out;
        }
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        snprintf(err, len, "unsupported .npy version %d", pre[6]);
        goto out;
    }
    if (hlen > (1u << 20) || !(hdr = malloc(hlen + 1)) || fread(hdr, 1, hlen, fp) != hlen) {
        snprintf(err, len, "bad or truncated header");
        goto out;
    }
    hdr[hlen] = '\0';
    if ((rc = npy_parse_header(hdr, a, err, len)) != 0) goto out;
    rc = -1;
    size_t bytes = a->count * a->elem;
    /* A regular file shorter than its shape says is that, not an allocation of what it claims
       (a 128-byte file claiming 1 TB said "out of memory") */
    struct stat st;
    long at = ftell(fp);
    if (at >= 0 && fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)(st.st_size - at) < (uint64_t)bytes) {
        snprintf(err, len, "data is shorter than its shape says (%zu bytes expected, %lld there)",
                 bytes, (long long)(st.st_size - at));
        goto out;
    }
    a->data = malloc(bytes ? bytes : 1);
    if (!a->data) {
        snprintf(err, len, "out of memory (%zu bytes)", bytes);
        goto out;
    }
    if (fread(a->data, 1, bytes, fp) != bytes) {
        snprintf(err, len, "data is shorter than its shape says (%zu bytes expected)", bytes);
        goto out;
    }
    if (fgetc(fp) != EOF) {
        snprintf(err, len, "trailing bytes after the data");
        goto out;
    }
    rc = 0;
out:
    if (rc != 0) {
        free(a->data);
        a->data = NULL;
    }
    free(hdr);
    fclose(fp);
    return rc;
}

static int npy_write(const char *path, const char *descr, const int64_t *shape, int rank,
                     const void *data, size_t bytes, char *err, size_t len) {
    char dict[256];
    size_t o = (size_t)snprintf(dict, sizeof dict,
                                "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < rank; i++)
        o += (size_t)snprintf(dict + o, sizeof dict - o, "%" PRId64 "%s", shape[i],
                              rank == 1 || i + 1 < rank ? ", " : "");
    o += (size_t)snprintf(dict + o, sizeof dict - o, "), }");
    size_t total = 10 + o + 1;
    size_t pad = (64 - total % 64) % 64; /* header padded to 64 bytes, ends in '\n' */
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    size_t hlen = o + pad + 1;
    pre[8] = (unsigned char)(hlen & 0xFF);
    pre[9] = (unsigned char)(hlen >> 8);
    /* Written in place (a temporary file renamed over it would change a file's mode, owner and
       hard links, and need a writable directory). A write that fails (a full disk) removes
       the partial regular file and says so: no half-written .npy stays behind unannounced. */
    FILE *fp = fopen(path, "wb");
    if (!fp) return snprintf(err, len, "cannot create: %s", strerror(errno)), -1;
    /* A failed write sets ferror, which gb_close_output reads. */
    (void)(fwrite(pre, 1, 10, fp) == 10 && fwrite(dict, 1, o, fp) == o);
    for (size_t i = 0; i < pad; i++)
        fputc(' ', fp);
    (void)(fputc('\n', fp) != EOF && fwrite(data, 1, bytes, fp) == bytes);
    int removed;
    if (gb_close_output(fp, path, &removed) != 0)
        return snprintf(err, len, "not written: %s%s", strerror(errno),
                        removed ? " (the partial file was removed)"
                                : " (what was written so far is left there)"),
               -1;
    return 0;
}

/* ---- the run ------------------------------------------------------------------------------ */

typedef struct run {
    const unsigned char *in;
    unsigned char *out;
    size_t in_bytes, out_bytes, n;
    size_t total;        /* submissions: n x --repeat */
    const uint64_t *off; /* variable-length items: n + 1 byte offsets into `in`, else NULL */
    gp_pipeline *p;
    atomic_size_t next;   /* next item a producer takes */
    atomic_size_t failed; /* items that completed with an error */
    atomic_int first_status;
    atomic_int submit_rc;
} run;

typedef struct item_ctx {
    run *r;
    size_t index;
    uint64_t t_submit, latency_ns; /* gp_now_ns() before the submit; callback - that */
} item_ctx;

typedef struct producer {
    run *r;
    item_ctx *items;
} producer;

static void done(void *user, int status, const void *output, size_t bytes) {
    item_ctx *it = user;
    it->latency_ns = gp_now_ns() - it->t_submit;
    if (status != GP_OK) {
        int zero = GP_OK;
        atomic_compare_exchange_strong(&it->r->first_status, &zero, status);
        atomic_fetch_add(&it->r->failed, 1);
        return;
    }
    memcpy(it->r->out + it->index * it->r->out_bytes, output, bytes);
}

static void *produce(void *arg) {
    producer *pr = arg;
    run *r = pr->r;
    for (;;) {
        size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->total) break;
        size_t k = i % r->n; /* the input item */
        pr->items[i].t_submit = gp_now_ns();
        int rc = r->off ? gp_pipeline_submit(r->p, r->in + r->off[k], r->off[k + 1] - r->off[k],
                                             done, &pr->items[i])
                        : gp_pipeline_submit(r->p, r->in + k * r->in_bytes, r->in_bytes, done,
                                             &pr->items[i]);
        if (rc != GP_OK) {
            int zero = GP_OK;
            atomic_compare_exchange_strong(&r->submit_rc, &zero, rc);
            break;
        }
    }
    return NULL;
}

/* `producers` threads (at least this thread) submit r->total items, then the pipeline drains. */
static void produce_all(producer *pr, size_t producers) {
    pthread_t th[64];
    size_t started = 0;
    for (; started < producers; started++)
        if (pthread_create(&th[started], NULL, produce, pr) != 0) break;
    if (started == 0) produce(pr);
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    gp_pipeline_drain(pr->r->p, -1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile (per mille: 500 = p50) of v[0..n), sorted ascending, in ms. */
static double pct_ms(const uint64_t *v, size_t n, size_t permille) {
    if (n == 0) return 0.0;
    size_t k = (permille * n + 999) / 1000;
    return (double)v[k ? k - 1 : 0] * 1e-6;
}

static void usage(FILE *f) {
    fprintf(
        f, "usage: gp-infer (--model M.safetensors [--spec FILE] | --demo mlp|cnn|encoder\n"
           "                 [--save-demo F]) [--input X.npy [--lengths L.npy] --output Y.npy]\n"
           "                [--backend auto|host|cuda] [--batch N] [--inflight K] [--producers P]\n"
           "                [--max-delay-us US] [--max-tokens T]\n"
           "                [--precision fp32|tf32|fp16|bf16] [--cuda-graphs] [--describe]\n"
           "                [--capacity C] [--repeat R] [--windows K] [--warmup W]\n"
           "                [--report R.json] [--profile] [--quiet] [--log error|warn|info]\n"
           "  --model M: a safetensors model (its spec: --spec FILE, the file's metadata, or\n"
           "             M with .spec for .safetensors); --demo mlp|cnn|encoder: a built-in one\n"
           "  --save-demo F: write the demo model as F (a safetensors file with its spec)\n"
           "  --input X.npy --output Y.npy: run every item of X, write the outputs as Y\n"
           "  --lengths L.npy: a variable-length model's tokens per item (X: all tokens packed)\n"
           "  --describe: print the model's layers, shapes and buffers\n"
           "  --backend B: auto (default: CUDA when usable, else host), host, cuda\n"
           "  --batch N: max_batch (default 64); --inflight K: slots (default 3)\n"
           "  --producers P: submitting threads (default 2)\n"
           "  --max-delay-us US: how long a partial batch may wait (default 0)\n"
           "  --max-tokens T: a variable-length model's longest item (default 512)\n"
           "  --precision P: the CUDA layers' precision (default fp32; host runs fp32)\n"
           "  --cuda-graphs: capture the compute in CUDA graphs (fixed-size models, CUDA)\n"
           "  --capacity C: the ring's items (a power of two >= --batch; default: the library's)\n"
           "  --repeat R: submit every item R times (a longer run; Y gets each item once)\n"
           "  --windows K: time K runs of N x R items back to back; items/s is their median\n"
           "               (default 1)\n"
           "  --warmup W: submit and drain W items before the timed run (default 0)\n"
           "  --report R.json: items/s, the run's window and every item's latency (submit to\n"
           "                   callback) as p50/p99/max, as JSON (bench/symptom-bench.py)\n"
           "  --profile: print each op's time per batch after the run (gp_model_profile; on\n"
           "             CUDA use --inflight 1 for each op's own time)\n"
           "  --quiet: no summary line on stderr\n"
           "  --log L: print the pipeline's log at level L and above to stderr (default: none)\n"
           "exit status: 0 ok; 1 a run-time failure; 2 usage (also an output path that cannot be\n"
           "written, or options the pipeline's config refuses); 3 bad model or input file; 4 the\n"
           "requested backend is not usable here\n");
}

/* --log's levels, by gp_log_level. */
static const char *const LOG_LEVELS[] = {"error", "warn", "info"};
enum { N_LOG_LEVELS = sizeof LOG_LEVELS / sizeof *LOG_LEVELS };

/* --log: the pipeline's log lines at or above the chosen level (user: a gp_log_level). */
static void log_line(void *user, gp_log_level level, const char *msg) {
    if ((int)level > *(const int *)user) return;
    fprintf(stderr, "gp-infer: log %s: %s\n",
            (unsigned)level < N_LOG_LEVELS ? LOG_LEVELS[level] : "?", msg);
}

/* "gp-infer: <what>: GP_EXXX: <detail>". Some library details already start with the code's
   name (the pipeline's recorded failures do, its validation messages do not): print it once. */
static void print_err(const char *what, int rc, const char *detail) {
    const char *name = gp_err_name(rc);
    size_t n = strlen(name);
    if (!strncmp(detail, name, n) && !strncmp(detail + n, ": ", 2))
        fprintf(stderr, "gp-infer: %s: %s\n", what, detail);
    else
        fprintf(stderr, "gp-infer: %s: %s: %s\n", what, name, detail[0] ? detail : "(no detail)");
}

/* A usage error: the reason first, then the usage. */
static int usage_error(const char *why) {
    fprintf(stderr, "gp-infer: %s\n", why);
    usage(stderr);
    return EXIT_USAGE;
}

static void shape_str(const int64_t *d, int rank, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < rank && o < len; i++)
        o += d[i] < 0 ? (size_t)snprintf(buf + o, len - o, "%s*", i ? "x" : "") /* tokens */
                      : (size_t)snprintf(buf + o, len - o, "%s%" PRId64, i ? "x" : "", d[i]);
}

static int parse_size(const char *s, size_t lo, size_t hi, size_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) return 0;
    *out = (size_t)v;
    return 1;
}

static int tool_main(int argc, char **argv) {
    const char *model_path = NULL, *demo = NULL, *save_demo = NULL, *spec = NULL;
    const char *in_path = NULL, *out_path = NULL, *backend_s = "auto", *prec_s = "fp32";
    const char *len_path = NULL, *report_path = NULL, *log_s = NULL;
    size_t batch = 64, inflight = 3, producers = 2, delay_us = 0, max_tokens = 0, repeat = 1,
           capacity = 0, warmup = 0, windows = 1;
    int describe = 0, quiet = 0, graphs = 0, profile = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **sval = NULL;
        size_t *nval = NULL, lo = 1, hi = 1u << 16;
        if (!strcmp(a, "--model"))
            sval = &model_path;
        else if (!strcmp(a, "--demo"))
            sval = &demo;
        else if (!strcmp(a, "--save-demo"))
            sval = &save_demo;
        else if (!strcmp(a, "--spec"))
            sval = &spec;
        else if (!strcmp(a, "--input"))
            sval = &in_path;
        else if (!strcmp(a, "--output"))
            sval = &out_path;
        else if (!strcmp(a, "--lengths"))
            sval = &len_path;
        else if (!strcmp(a, "--report"))
            sval = &report_path;
        else if (!strcmp(a, "--log"))
            sval = &log_s;
        else if (!strcmp(a, "--max-delay-us"))
            nval = &delay_us, lo = 0, hi = 60000000;
        else if (!strcmp(a, "--max-tokens"))
            nval = &max_tokens, hi = 1u << 24;
        else if (!strcmp(a, "--backend"))
            sval = &backend_s;
        else if (!strcmp(a, "--precision"))
            sval = &prec_s;
        else if (!strcmp(a, "--batch"))
            nval = &batch;
        else if (!strcmp(a, "--inflight"))
            nval = &inflight, hi = 64;
        else if (!strcmp(a, "--producers"))
            nval = &producers, hi = 64;
        else if (!strcmp(a, "--capacity"))
            nval = &capacity, lo = 0, hi = (size_t)1 << 30;
        else if (!strcmp(a, "--repeat"))
            nval = &repeat, hi = 1u << 20;
        else if (!strcmp(a, "--windows"))
            nval = &windows, hi = 1000;
        else if (!strcmp(a, "--warmup"))
            nval = &warmup, lo = 0, hi = 1u << 24;
        else if (!strcmp(a, "--describe")) {
            describe = 1;
            continue;
        } else if (!strcmp(a, "--cuda-graphs")) {
            graphs = 1;
            continue;
        } else if (!strcmp(a, "--profile")) {
            profile = 1;
            continue;
        } else if (!strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "gp-infer: unknown argument '%s'\n", a);
            usage(stderr);
            return EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gp-infer: %s needs a value\n", a);
            return EXIT_USAGE;
        }
        if (gb_is_option(argv[i + 1])) { /* "--output --quiet": a forgotten value */
            fprintf(stderr,
                    "gp-infer: %s needs a value (the next word, %s, is an option; for a file "
                    "whose name starts with -, write ./%s)\n",
                    a, argv[i + 1], argv[i + 1]);
            return EXIT_USAGE;
        }
        const char *v = argv[++i];
        if (sval) {
            *sval = v;
        } else if (!parse_size(v, lo, hi, nval)) {
            fprintf(stderr, "gp-infer: %s: '%s' is not a number in [%zu, %zu]\n", a, v, lo, hi);
            return EXIT_USAGE;
        }
    }
    static int log_level = -1; /* log_line's user: read by the pipeline's threads */
    for (int i = 0; log_s && i < N_LOG_LEVELS; i++)
        if (!strcmp(log_s, LOG_LEVELS[i])) log_level = i;
    if (log_s && log_level < 0) {
        fprintf(stderr, "gp-infer: --log '%s': error | warn | info\n", log_s);
        return EXIT_USAGE;
    }
    gp_backend backend;
    if (!strcmp(backend_s, "auto"))
        backend = GP_BACKEND_AUTO;
    else if (!strcmp(backend_s, "host"))
        backend = GP_BACKEND_HOST;
    else if (!strcmp(backend_s, "cuda"))
        backend = GP_BACKEND_CUDA;
    else {
        fprintf(stderr, "gp-infer: --backend '%s': auto | host | cuda\n", backend_s);
        return EXIT_USAGE;
    }
    gp_model_options opt;
    gp_model_options_init(&opt);
    if (gp_precision_parse(prec_s, &opt.precision) != GP_OK) {
        fprintf(stderr, "gp-infer: --precision '%s': fp32 | tf32 | fp16 | bf16\n", prec_s);
        return EXIT_USAGE;
    }
    if (!model_path && !demo)
        return usage_error("--model M.safetensors is required (the model to run; or --demo "
                           "mlp|cnn|encoder for a built-in one)");
    if (model_path && demo) return usage_error("--model and --demo are exclusive: give one");
    if (demo && spec) return usage_error("--spec applies to --model only (a demo has its own)");
    if (save_demo && !demo) return usage_error("--save-demo needs --demo NAME (the demo to save)");
    if (in_path && !out_path)
        return usage_error("--output is required (where to write the results, an .npy file)");
    if (out_path && !in_path)
        return usage_error("--input is required with --output (the items to run, an .npy file)");
    if (len_path && !in_path)
        return usage_error("--lengths goes with --input (the tokens of every item, packed)");
    if (!in_path && !save_demo && !describe)
        return usage_error("nothing to do: give --input X.npy --output Y.npy to run the model, "
                           "or --describe to print it");
    if ((report_path || profile) && !in_path)
        return usage_error(report_path ? "--report goes with --input (it reports a run)"
                                       : "--profile goes with --input (it times a run)");
    /* The outputs' paths, before the run (gp-bench-util.c): writable, and none another's. */
    const char *const outputs[][2] = {
        {"--output", out_path}, {"--report", report_path}, {"--save-demo", save_demo}};
    const char *const inputs[][2] = {
        {"--input", in_path}, {"--lengths", len_path}, {"--model", model_path}, {"--spec", spec}};
    if (gb_check_outputs("gp-infer", outputs, 3) != 0 ||
        gb_check_distinct("gp-infer", outputs, 3, inputs, 4) != 0)
        return EXIT_USAGE;
    opt.spec_path = spec;
    if (max_tokens) opt.max_tokens = max_tokens;
    opt.profile = profile;

    char err[512];
    gp_model *m = NULL;
    int rc;
    if (demo) {
        rc = gp_model_demo(demo, &opt, &m, err, sizeof err);
        if (rc == GP_OK && save_demo) {
            void *img;
            size_t len;
            rc = gp_model_demo_safetensors(demo, &opt, &img, &len, err, sizeof err);
            if (rc == GP_OK) {
                FILE *f = fopen(save_demo, "wb");
                int removed;
                if (f) (void)fwrite(img, 1, len, f); /* a short write sets ferror */
                free(img);
                if (gb_close_output(f, save_demo, &removed) != 0) {
                    fprintf(stderr, "gp-infer: --save-demo %s: not written: %s%s\n", save_demo,
                            strerror(errno), removed ? " (the partial file was removed)" : "");
                    gp_model_free(m);
                    return EXIT_RUN;
                }
            }
        }
    } else {
        rc = gp_model_load(model_path, &opt, &m, err, sizeof err);
    }
    if (rc != GP_OK) {
        char what[600];
        snprintf(what, sizeof what, "model %s", demo ? demo : model_path);
        print_err(what, rc, err);
        return rc == GP_EINVAL && demo ? EXIT_USAGE : EXIT_INPUT;
    }
    gp_tensor_info ii, oi;
    gp_model_input_info(m, &ii);
    gp_model_output_info(m, &oi);
    if (max_tokens && !(ii.rank >= 1 && ii.dims[0] < 0)) {
        fprintf(stderr,
                "gp-infer: --max-tokens is for variable-length models; this one takes %s "
                "items of a fixed shape\n",
                gp_dtype_name(ii.dtype));
        gp_model_free(m);
        return EXIT_USAGE;
    }
    if (describe && (rc = gp_model_describe(m, stdout)) != GP_OK) {
        fprintf(stderr, "gp-infer: --describe: %s\n", gp_err_name(rc));
        gp_model_free(m);
        return EXIT_RUN;
    }
    if (!in_path) {
        gp_model_free(m);
        return 0;
    }

    char want[96], got[96];
    shape_str(ii.dims, ii.rank, want, sizeof want);
    npy x;
    int xr = npy_read(in_path, &x, err, sizeof err);
    if (xr != 0) {
        if (xr == -2)
            fprintf(stderr, "gp-infer: input %s: %s; the model takes %s items: convert with %s\n",
                    in_path, err, gp_dtype_name(ii.dtype), npy_fix(ii.dtype));
        else
            fprintf(stderr, "gp-infer: input %s: %s\n", in_path, err);
        gp_model_free(m);
        return EXIT_INPUT;
    }
    gp_dtype xt;
    npy_dtype(x.descr, &xt);
    int var = ii.rank >= 1 && ii.dims[0] < 0; /* variable length: tokens, packed */
    if (var != (len_path != NULL)) {
        fprintf(stderr,
                var ? "gp-infer: the model takes variable-length items (%s * tokens): give "
                      "--lengths L.npy (tokens per item, int64) with --input holding every "
                      "item's tokens back to back\n"
                    : "gp-infer: --lengths is for variable-length models; this one takes %s "
                      "items of a fixed shape\n",
                gp_dtype_name(ii.dtype));
        free(x.data);
        gp_model_free(m);
        return EXIT_INPUT;
    }
    /* Fixed: (N, *item). Variable: (T, *token), T the total tokens. */
    int shape_ok = x.rank == ii.rank + !var;
    for (int d = var; shape_ok && d < ii.rank; d++)
        shape_ok = x.shape[d + !var] == ii.dims[d];
    if (xt != ii.dtype || !shape_ok) {
        shape_str(x.shape, x.rank, got, sizeof got);
        char fix[300] = "";
        if (xt != ii.dtype) snprintf(fix, sizeof fix, "; convert with %s", npy_fix(ii.dtype));
        if (var)
            fprintf(stderr,
                    "gp-infer: input %s: has dtype %s and shape %s, but the model takes %s tokens "
                    "of shape %s: expected every item's tokens packed, shape T%s%s%s\n",
                    in_path, gp_dtype_name(xt), x.rank ? got : "()", gp_dtype_name(ii.dtype), want,
                    ii.rank > 1 ? " x " : "", ii.rank > 1 ? strchr(want, 'x') + 1 : "", fix);
        else
            fprintf(stderr,
                    "gp-infer: input %s: has dtype %s and shape %s, but the model takes %s items "
                    "of shape %s: expected shape N x %s%s\n",
                    in_path, gp_dtype_name(xt), x.rank ? got : "()", gp_dtype_name(ii.dtype), want,
                    want, fix);
        free(x.data);
        gp_model_free(m);
        return EXIT_INPUT;
    }
    size_t n = (size_t)x.shape[0];
    uint64_t *off = NULL;
    if (var) {
        npy l;
        gp_dtype lt;
        int lr = npy_read(len_path, &l, err, sizeof err);
        if (lr != 0 || !npy_dtype(l.descr, &lt) || (lt != GP_DTYPE_I64 && lt != GP_DTYPE_I32) ||
            l.rank != 1) {
            if (lr == 0)
                snprintf(err, sizeof err,
                         "must be a 1-D int64 (or int32) array, one token count "
                         "per item%s",
                         l.rank == 1 ? ": convert with x.astype(np.int64)" : "");
            else if (lr == -2)
                snprintf(err + strlen(err), sizeof err - strlen(err),
                         "; token counts are int64 (or int32): convert with x.astype(np.int64)");
            fprintf(stderr, "gp-infer: lengths %s: %s\n", len_path, err);
            if (lr == 0) free(l.data);
            free(x.data);
            gp_model_free(m);
            return EXIT_INPUT;
        }
        size_t max_t = gp_model_input_bytes(m) / ii.bytes, T = n;
        n = (size_t)l.shape[0];
        off = malloc((n + 1) * sizeof *off);
        int bad = !off;
        uint64_t sum = 0;
        if (off) off[0] = 0;
        for (size_t k = 0; k < n && !bad; k++) {
            int64_t v =
                lt == GP_DTYPE_I64 ? ((const int64_t *)l.data)[k] : ((const int32_t *)l.data)[k];
            if (v < 1 || (uint64_t)v > max_t) {
                fprintf(stderr,
                        "gp-infer: lengths %s: item %zu has %" PRId64 " tokens; the model takes "
                        "1..%zu per item\n",
                        len_path, k, v, max_t);
                bad = 2;
                break;
            }
            sum += (uint64_t)v;
            off[k + 1] = sum * ii.bytes;
        }
        free(l.data);
        if (!bad && sum != T) {
            fprintf(stderr,
                    "gp-infer: lengths %s: the items have %" PRIu64 " tokens in all, but input %s "
                    "holds %zu\n",
                    len_path, sum, in_path, T);
            bad = 2;
        }
        /* Token ids outside the vocabulary: a bad input file, named by its item and token
           here, before the run (the pipeline would fail the item alone, by its place in a
           batch). */
        int64_t vocab = gp_model_vocab(m);
        for (size_t k = 0; k < n && !bad && vocab > 0; k++) {
            size_t t0 = (size_t)(off[k] / ii.bytes), t1 = (size_t)(off[k + 1] / ii.bytes);
            for (size_t t = t0; t < t1 && !bad; t++) {
                int64_t id = xt == GP_DTYPE_I64   ? ((const int64_t *)x.data)[t]
                             : xt == GP_DTYPE_U32 ? (int64_t)((const uint32_t *)x.data)[t]
                                                  : (int64_t)((const int32_t *)x.data)[t];
                if (id < 0 || id >= vocab) {
                    fprintf(stderr,
                            "gp-infer: input %s: item %zu (tokens %zu..%zu of the file): token "
                            "%zu has id %" PRId64 ", outside the model's vocabulary 0..%" PRId64
                            "\n",
                            in_path, k, t0, t1 - 1, t - t0, id, vocab - 1);
                    bad = 2;
                }
            }
        }
        if (bad) {
            if (bad == 1) fprintf(stderr, "gp-infer: out of memory\n");
            free(off);
            free(x.data);
            gp_model_free(m);
            return bad == 1 ? EXIT_RUN : EXIT_INPUT;
        }
    }
    run r = {.in = x.data, .in_bytes = ii.bytes, .out_bytes = oi.bytes, .n = n, .off = off};
    r.total = n * repeat; /* repeat <= 2^20, n < 2^40 (an .npy this program read) */
    r.out = calloc(n ? n : 1, oi.bytes);
    /* The warm-up's submissions use the first of these too (their latencies are overwritten).
       An input of no items has nothing to warm up with. */
    if (n == 0) warmup = 0;
    size_t n_ctx = r.total > warmup ? r.total : warmup;
    item_ctx *items = malloc((n_ctx ? n_ctx : 1) * sizeof *items);
    if (!r.out || !items) {
        fprintf(stderr, "gp-infer: out of memory\n");
        free(items), free(r.out), free(off), free(x.data);
        gp_model_free(m);
        return EXIT_RUN;
    }
    for (size_t i = 0; i < n_ctx; i++)
        items[i] = (item_ctx){.r = &r, .index = i % n};

    gp_config cfg;
    gp_config_init(&cfg);
    cfg.backend = backend;
    cfg.max_batch = batch;
    cfg.inflight = (int)inflight;
    cfg.cuda_graphs = graphs;
    cfg.max_delay_us = (uint32_t)delay_us;
    if (capacity) cfg.capacity = capacity;
    if (log_level >= 0) {
        cfg.log = log_line;
        cfg.log_user = &log_level;
    }
    gp_model_configure(m, &cfg);
    int exit_code = 0;
    rc = gp_pipeline_create(&cfg, &r.p, err, sizeof err);
    if (rc != GP_OK) {
        char detail[256] = "", what[64], msg[800];
        gp_model_last_error(m, detail, sizeof detail);
        snprintf(what, sizeof what, "backend %s", backend_s);
        snprintf(msg, sizeof msg, "%s%s%s", err, detail[0] ? ": " : "", detail);
        print_err(what, rc, msg);
        /* The config the options made refused ("config.capacity: ..."): a usage error; any
           other failure (the model's setup among them) is a run-time one. */
        exit_code = rc == GP_ENODEV || rc == GP_ENOTSUP              ? EXIT_NODEV
                    : rc == GP_EINVAL && !strncmp(err, "config.", 7) ? EXIT_USAGE
                                                                     : EXIT_RUN;
        goto out;
    }
    producer pr = {&r, items};
    gp_stats_mark *mark = NULL; /* after the warm-up: the report's counters cover the window */
    if (warmup) { /* untimed; a failure shows in r.failed / r.submit_rc, reported below */
        size_t timed = r.total;
        r.total = warmup;
        produce_all(&pr, producers);
        r.total = timed;
        atomic_store(&r.next, 0);
        if (profile) gp_model_profile_reset(m); /* loaded with options.profile: GP_OK */
        if ((rc = gp_pipeline_mark(r.p, &mark)) != GP_OK) {
            fprintf(stderr, "gp-infer: gp_pipeline_mark: %s\n", gp_err_name(rc));
            gp_pipeline_destroy(r.p, GP_DESTROY_DRAIN);
            exit_code = EXIT_RUN;
            goto out;
        }
    }
    /* --windows: K timed runs of r.total submissions; every latency kept (lat), each window's
       items/s (rate), the figure their median. */
    size_t total = r.total;
    uint64_t *lat = NULL;
    double *rate = malloc(windows * sizeof *rate), *sorted = malloc(windows * sizeof *sorted);
    if (total <= SIZE_MAX / sizeof *lat / windows)
        lat = malloc((total ? total * windows : 1) * sizeof *lat);
    if (!lat || !rate || !sorted) {
        fprintf(stderr, "gp-infer: out of memory\n");
        free(lat), free(rate), free(sorted);
        gp_stats_mark_free(mark);
        gp_pipeline_destroy(r.p, GP_DESTROY_DRAIN);
        exit_code = EXIT_RUN;
        goto out;
    }
    uint64_t t0 = 0, t1 = 0;
    size_t ran = 0; /* windows run: a failed submission or item ends the run after its window */
    while (ran < windows) {
        atomic_store(&r.next, 0);
        uint64_t w0 = gp_now_ns();
        produce_all(&pr, producers);
        uint64_t w1 = gp_now_ns();
        if (ran == 0) t0 = w0;
        t1 = w1;
        double ws = (double)(w1 - w0) * 1e-9;
        rate[ran] = ws > 0 ? (double)total / ws : 0.0;
        for (size_t i = 0; i < total; i++)
            lat[ran * total + i] = items[i].latency_ns;
        ran++;
        if (atomic_load(&r.submit_rc) != GP_OK || atomic_load(&r.failed)) break;
    }
    memcpy(sorted, rate, ran * sizeof *sorted);
    qsort(sorted, ran, sizeof *sorted, cmp_double);
    double ips = ran % 2 ? sorted[ran / 2] : (sorted[ran / 2 - 1] + sorted[ran / 2]) / 2;
    double secs = ips > 0 ? (double)total / ips : (double)(t1 - t0) * 1e-9;
    free(sorted);
    gp_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    rc = mark ? gp_pipeline_stats_since(r.p, mark, &st) : gp_pipeline_stats(r.p, &st);
    gp_stats_mark_free(mark);
    if (rc != GP_OK) {
        fprintf(stderr, "gp-infer: stats: %s\n", gp_err_name(rc));
        free(lat), free(rate);
        gp_pipeline_destroy(r.p, GP_DESTROY_DRAIN);
        exit_code = EXIT_RUN;
        goto out;
    }
    /* Every submission's latency, sorted (a failed run exits below; its latencies are not
       used). */
    size_t nlat = total * ran;
    qsort(lat, nlat, sizeof *lat, cmp_u64);
    const char *prec_name =
        st.backend == GP_BACKEND_CUDA ? gp_precision_name(opt.precision) : "fp32";
    double mean_batch = st.batches ? (double)st.batch_items / (double)st.batches : 0.0;
    if (!quiet && st.backend != GP_BACKEND_CUDA && opt.precision != GP_PRECISION_FP32)
        fprintf(stderr,
                "gp-infer: --precision %s is for the CUDA backend: the host backend ran fp32\n",
                gp_precision_name(opt.precision));
    if (!quiet) {
        /* "(N items/s)" is the figure, and stays the first such group: model-bench.py parses
           it. The windows' own figures follow without parentheses. */
        char wins[256] = "";
        if (ran > 1) {
            size_t at = (size_t)snprintf(wins, sizeof wins, ", median of %zu windows:", ran);
            for (size_t k = 0; k < ran && at < sizeof wins; k++)
                at += (size_t)snprintf(wins + at, sizeof wins - at, " %.0f", rate[k]);
        }
        fprintf(stderr,
                "gp-infer: %zu items in %.3f s (%.1f items/s)%s, backend %s%s%s%s, %s, mean batch "
                "%.1f, latency p50 %.3f ms p99 %.3f ms\n",
                total, secs, ips, wins, gp_backend_name(st.backend),
                st.fell_back ? " (AUTO fell back: " : "", st.fell_back ? st.fallback_reason : "",
                st.fell_back ? ")" : "", prec_name, mean_batch, pct_ms(lat, nlat, 500),
                pct_ms(lat, nlat, 990));
    }
    if (report_path) {
        FILE *f = fopen(report_path, "w");
        if (f) {
            fprintf(f,
                    "{\"items\": %zu, \"seconds\": %.9f, \"items_per_s\": %.3f, "
                    "\"windows\": %zu, "
                    "\"t_start_ns\": %" PRIu64 ", \"t_end_ns\": %" PRIu64 ", "
                    "\"p50_ms\": %.4f, \"p99_ms\": %.4f, \"max_ms\": %.4f, "
                    "\"backend\": \"%s\", \"precision\": \"%s\", "
                    "\"cuda_graphs\": %s, \"graph_replays\": %" PRIu64
                    ", \"max_batch\": %zu, \"inflight\": %zu, "
                    "\"producers\": %zu, \"batches\": %" PRIu64 ", \"mean_batch\": %.2f, "
                    "\"h2d_busy_ns\": %" PRIu64 ", \"compute_busy_ns\": %" PRIu64
                    ", \"d2h_busy_ns\": %" PRIu64 ", \"window_items_per_s\": [",
                    total, secs, ips, ran, t0, t1, pct_ms(lat, nlat, 500), pct_ms(lat, nlat, 990),
                    pct_ms(lat, nlat, 1000), gp_backend_name(st.backend), prec_name,
                    st.cuda_graphs ? "true" : "false", st.graph_replays, batch, inflight, producers,
                    st.batches, mean_batch, st.h2d_busy_ns, st.compute_busy_ns, st.d2h_busy_ns);
            for (size_t k = 0; k < ran; k++)
                fprintf(f, "%s%.3f", k ? ", " : "", rate[k]);
            fprintf(f, "]}\n"); /* a failed write sets ferror, which the close reads */
        }
        int removed;
        if (gb_close_output(f, report_path, &removed) != 0) {
            fprintf(stderr, "gp-infer: --report %s: not written: %s%s\n", report_path,
                    strerror(errno), removed ? " (the partial file was removed)" : "");
            exit_code = EXIT_RUN;
        }
    }
    free(lat), free(rate);
    int dr = gp_pipeline_destroy(r.p, GP_DESTROY_DRAIN);
    if (atomic_load(&r.submit_rc) != GP_OK) {
        fprintf(stderr, "gp-infer: submit failed: %s\n", gp_err_name(atomic_load(&r.submit_rc)));
        exit_code = EXIT_RUN;
        goto out;
    }
    if (atomic_load(&r.failed) || dr != GP_OK) {
        char detail[256] = "";
        gp_model_last_error(m, detail, sizeof detail);
        fprintf(stderr, "gp-infer: %zu of %zu items failed (%s)%s%s\n", atomic_load(&r.failed),
                r.total,
                gp_err_name(atomic_load(&r.first_status) ? atomic_load(&r.first_status) : dr),
                detail[0] ? ": " : "", detail);
        exit_code = EXIT_RUN;
        goto out;
    }
    /* Every batch is done (drained): each was counted before its callbacks ran. */
    if (profile && (rc = gp_model_profile(m, stdout)) != GP_OK) {
        fprintf(stderr, "gp-infer: --profile: %s\n", gp_err_name(rc));
        exit_code = EXIT_RUN;
    }
    int64_t yshape[GP_MODEL_MAX_RANK + 1];
    yshape[0] = (int64_t)n;
    for (int d = 0; d < oi.rank; d++)
        yshape[d + 1] = oi.dims[d];
    const char *descr = oi.dtype == GP_DTYPE_I64 ? "<i8" : "<f4";
    if (npy_write(out_path, descr, yshape, oi.rank + 1, r.out, n * oi.bytes, err, sizeof err) !=
        0) {
        fprintf(stderr, "gp-infer: output %s: %s\n", out_path, err);
        exit_code = EXIT_RUN;
    }
out:
    free(items);
    free(off);
    free(r.out);
    free(x.data);
    gp_model_free(m);
    return exit_code;
}

int main(int argc, char **argv) {
    return gb_stdout_checked("gp-infer", tool_main(argc, argv));
}

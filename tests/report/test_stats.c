/*
 * gp_stats on the host backend: every field is filled from the counters it names, windows
 * (gp_pipeline_mark / gp_pipeline_stats_since) are the difference of two snapshots, struct_size
 * is honoured, the layout of the fields before this version is unchanged (ABI), and the JSON
 * and Prometheus renderings are well formed (JSON by a strict validator; Prometheus by the
 * text-format rules: HELP/TYPE before samples, valid names and labels, counters end in _total,
 * histogram buckets cumulative with +Inf == _count) and carry every field of GP_STATS_FIELDS.
 * Every renderer returns GP_EIO on a stream that fails and GP_EINVAL on bad arguments.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jsoncheck.h"
#include "load.h"
#include "pipeline.h" /* gp__hist: the histogram itself is internal */

/* ---- histogram -------------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_hist(void) {
    static gp__hist h; /* zeroed; 8 KiB */
    enum { N = 20000 };
    static uint64_t v[N];
    uint64_t x = 88172645463325252u, sum = 0;
    for (int i = 0; i < N; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        v[i] = (x % 1000000u) * (1u + x % 7u) + (uint64_t)(i % 5); /* 0 .. ~7e6, some tiny */
        gp__hist_add(&h, v[i]);
        sum += v[i];
    }
    qsort(v, N, sizeof v[0], cmp_u64);
    static uint64_t counts[GP__HIST_BUCKETS];
    gp__hist_read(&h, counts);
    const double qs[] = {0.0, 0.01, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0};
    for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++) {
        uint64_t exact = v[(size_t)(qs[k] * (N - 1))],
                 got = gp__hist_counts_quantile(counts, qs[k]);
        double rel = fabs((double)got - (double)exact) / ((double)exact + 1.0);
        if (rel > 1.0 / 16) {
            fprintf(stderr, "q %.3f: exact %llu got %llu\n", qs[k], (unsigned long long)exact,
                    (unsigned long long)got);
            GPT_CHECK(rel <= 1.0 / 16);
        }
    }
    uint64_t mx = gp__hist_counts_max(counts);
    GPT_CHECK(mx >= v[N - 1] && (double)mx <= (double)v[N - 1] * (1 + 1.0 / 16) + 1);
    GPT_EQ(GP__READ(h.sum), sum);
    /* Bucket edges: every value lies in [low(i), low(i + 1)) of its own bucket. */
    for (uint64_t t = 1; t < (UINT64_C(1) << 40); t = t * 3 + 1) {
        unsigned i = gp__hist_index(t);
        GPT_CHECK(gp__hist_bucket_low(i) <= t && t < gp__hist_bucket_low(i + 1));
    }
    uint64_t empty[GP__HIST_BUCKETS] = {0};
    GPT_EQ(gp__hist_counts_quantile(empty, 0.5), 0);
    GPT_EQ(gp__hist_counts_max(empty), 0);
}

/* ---- renderings ------------------------------------------------------------------------- */

static char *capture(int (*fn)(gp_pipeline *, FILE *), gp_pipeline *p, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    GPT_CHECK(f);
    GPT_RC(fn(p, f), GP_OK);
    GPT_CHECK(fclose(f) == 0);
    return text;
}

static char *capture_stats(int (*fn)(const gp_stats *, FILE *), const gp_stats *s, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    GPT_CHECK(f);
    GPT_RC(fn(s, f), GP_OK);
    GPT_CHECK(fclose(f) == 0);
    return text;
}

/* Every field of GP_STATS_FIELDS (but struct_size) is a key of the JSON object. */
static void json_has_every_field(const char *t) {
    char key[80];
#define GPT_JSON_KEY(kind, type, name, dim, unit, prom, help)                                      \
    if (strcmp(#name, "struct_size") != 0) {                                                       \
        snprintf(key, sizeof key, "\"%s\":", #name);                                               \
        if (!strstr(t, key)) {                                                                     \
            fprintf(stderr, "JSON lacks %s\n", key);                                               \
            GPT_CHECK(0);                                                                          \
        }                                                                                          \
    }
    GP_STATS_FIELDS(GPT_JSON_KEY)
#undef GPT_JSON_KEY
}

static void check_json_text(const char *t, size_t len) {
    size_t at = 0;
    const char *err = jsoncheck(t, len, &at);
    if (err) fprintf(stderr, "JSON invalid at %zu: %s\n%s\n", at, err, t);
    GPT_CHECK(err == NULL);
    json_has_every_field(t);
}

static void check_json(gp_pipeline *p) {
    size_t len;
    char *t = capture(gp_pipeline_stats_json, p, &len);
    check_json_text(t, len);
    const char *keys[] = {
        "\"batch_hist\":[", "\"close_reasons\":{", "\"latency_hist\":[", "\"config\":{",
        "\"derived\":{", "\"verdict\":", "\"knob\":", "\"latency_bounds_s\":[",
        /* the diagnosis entire (gpupipe.h: "the derived fractions and the diagnosis") */
        "\"wall_s\":", "\"device_items_per_s\":", "\"padding\":"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strstr(t, keys[i])) {
            fprintf(stderr, "JSON lacks %s\n", keys[i]);
            GPT_CHECK(0);
        }
    free(t);
}

static int valid_name(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!(c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (i && c >= '0' && c <= '9')))
            return 0;
    }
    return n > 0;
}

typedef struct family {
    char name[96];
    char type[16];
    int samples;
    double last_bucket, inf, count;
    int has_sum, has_inf, has_count;
} family;

/* Prometheus text: the format rules above, and a family for every field with a `prom` name. */
static void check_prometheus_text(char *t) {
    char want[96];
#define GPT_PROM_FAMILY(kind, type, name, dim, unit, prom, help)                                   \
    if (prom[0]) {                                                                                 \
        snprintf(want, sizeof want, "# TYPE gpupipe_%.*s ", (int)strcspn(prom, "{"), prom);        \
        if (!strstr(t, want)) {                                                                    \
            fprintf(stderr, "Prometheus text lacks %s(field %s)\n", want, #name);                  \
            GPT_CHECK(0);                                                                          \
        }                                                                                          \
    }
    GP_STATS_FIELDS(GPT_PROM_FAMILY)
#undef GPT_PROM_FAMILY
    family fam[64];
    int nf = 0, cur = -1;
    char *save = NULL;
    for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# HELP ", 7) == 0) {
            GPT_CHECK(nf < 64);
            cur = nf++;
            memset(&fam[cur], 0, sizeof fam[cur]);
            size_t n = strcspn(line + 7, " ");
            GPT_CHECK(n < sizeof fam[cur].name && valid_name(line + 7, n));
            memcpy(fam[cur].name, line + 7, n);
            GPT_CHECK(strlen(line + 7 + n) > 1); /* help text present */
            for (int i = 0; i < cur; i++)
                GPT_CHECK(strcmp(fam[i].name, fam[cur].name) != 0); /* one HELP per family */
            continue;
        }
        if (strncmp(line, "# TYPE ", 7) == 0) {
            GPT_CHECK(cur >= 0 && fam[cur].samples == 0);
            size_t n = strlen(fam[cur].name);
            GPT_CHECK(strncmp(line + 7, fam[cur].name, n) == 0 && line[7 + n] == ' ');
            snprintf(fam[cur].type, sizeof fam[cur].type, "%s", line + 8 + n);
            GPT_CHECK(!strcmp(fam[cur].type, "counter") || !strcmp(fam[cur].type, "gauge") ||
                      !strcmp(fam[cur].type, "histogram"));
            if (!strcmp(fam[cur].type, "counter"))
                GPT_CHECK(n > 6 && strcmp(fam[cur].name + n - 6, "_total") == 0);
            if (!strcmp(fam[cur].type, "histogram"))
                GPT_CHECK(strstr(fam[cur].name, "_seconds") || strstr(fam[cur].name, "_items"));
            continue;
        }
        GPT_CHECK(line[0] != '#' && cur >= 0 && fam[cur].type[0]);
        family *f = &fam[cur];
        size_t n = strcspn(line, "{ ");
        GPT_CHECK(valid_name(line, n));
        size_t fl = strlen(f->name);
        GPT_CHECK(n >= fl && strncmp(line, f->name, fl) == 0); /* sample of this family */
        char suffix[32];
        GPT_CHECK(n - fl < sizeof suffix);
        snprintf(suffix, sizeof suffix, "%.*s", (int)(n - fl), line + fl);
        char *rest = line + n;
        char le[32] = "";
        if (*rest == '{') { /* labels: k="v"(,k="v")* */
            rest++;
            for (;;) {
                size_t k = strcspn(rest, "=");
                GPT_CHECK(valid_name(rest, k) && rest[k] == '=' && rest[k + 1] == '"');
                char *v = rest + k + 2, *e = strchr(v, '"');
                GPT_CHECK(e);
                if (k == 2 && strncmp(rest, "le", 2) == 0)
                    snprintf(le, sizeof le, "%.*s", (int)(e - v), v);
                rest = e + 1;
                if (*rest == ',') {
                    rest++;
                    continue;
                }
                GPT_CHECK(*rest == '}');
                rest++;
                break;
            }
        }
        GPT_CHECK(*rest == ' ');
        char *end;
        double val = strtod(rest + 1, &end);
        GPT_CHECK(end != rest + 1 && *end == '\0' && isfinite(val) && val >= 0);
        f->samples++;
        if (!strcmp(f->type, "histogram")) {
            if (!strcmp(suffix, "_bucket")) {
                GPT_CHECK(le[0] && !f->has_inf);
                GPT_CHECK(val >= f->last_bucket); /* cumulative */
                f->last_bucket = val;
                if (!strcmp(le, "+Inf")) {
                    f->has_inf = 1;
                    f->inf = val;
                }
            } else if (!strcmp(suffix, "_sum")) {
                f->has_sum = 1;
            } else if (!strcmp(suffix, "_count")) {
                f->has_count = 1;
                f->count = val;
            } else {
                fprintf(stderr, "unexpected histogram sample: %s\n", line);
                GPT_CHECK(0);
            }
        } else {
            GPT_CHECK(n == fl); /* no suffix on counters and gauges */
        }
    }
    GPT_CHECK(nf >= 15);
    for (int i = 0; i < nf; i++) {
        GPT_CHECK(fam[i].type[0] && fam[i].samples > 0);
        if (!strcmp(fam[i].type, "histogram")) {
            GPT_CHECK(fam[i].has_inf && fam[i].has_sum && fam[i].has_count);
            GPT_CHECK(fam[i].inf == fam[i].count);
        }
    }
}

static void check_prometheus(gp_pipeline *p) {
    size_t len;
    char *t = capture(gp_pipeline_stats_prometheus, p, &len);
    check_prometheus_text(t);
    free(t);
}

/* ---- counters --------------------------------------------------------------------------- */

static int fail_first_batch(void *user, const gp_batch *b) {
    return b->first_seq == 0 ? GP_ECOMPUTE : GP_OK;
}

static int noop(void *user, const gp_batch *b) {
    return GP_OK;
}

static void noop_done(void *user, int status, const void *out, size_t n) {}

static int slow_prep(void *user, const void *src, size_t n, void *slot, size_t slot_bytes) {
    load_sleep_us(200);
    return GP_OK;
}

static uint64_t sum_u64(const uint64_t *a, int n) {
    uint64_t s = 0;
    for (int i = 0; i < n; i++)
        s += a[i];
    return s;
}

/* ---- renderer errors ------------------------------------------------------------------- */

typedef int (*stats_renderer)(const gp_stats *, FILE *);
typedef int (*pipeline_renderer)(gp_pipeline *, FILE *);

/* Every renderer: GP_EINVAL on bad arguments, GP_EIO on a stream whose writes fail (a write
   error inside the FILE buffer shows up only at fflush: the renderer flushes). */
static void test_renderer_errors(gp_pipeline *p, const gp_stats *s) {
    const stats_renderer sr[] = {gp_stats_report, gp_stats_json, gp_stats_prometheus};
    const pipeline_renderer pr[] = {gp_pipeline_report, gp_pipeline_stats_json,
                                    gp_pipeline_stats_prometheus};
    gp_stats bad = *s;
    for (int i = 0; i < 3; i++) {
        GPT_RC(sr[i](NULL, stdout), GP_EINVAL);
        GPT_RC(sr[i](s, NULL), GP_EINVAL);
        bad.struct_size = 3;
        GPT_RC(sr[i](&bad, stdout), GP_EINVAL);
        bad.struct_size = sizeof bad + 1;
        GPT_RC(sr[i](&bad, stdout), GP_EINVAL);
        GPT_RC(pr[i](NULL, stdout), GP_EINVAL);
        GPT_RC(pr[i](p, NULL), GP_EINVAL);

        FILE *full = fopen("/dev/full", "w"); /* every write: ENOSPC */
        GPT_CHECK(full);
        GPT_RC(sr[i](s, full), GP_EIO);
        fclose(full);
        full = fopen("/dev/full", "w");
        GPT_CHECK(full);
        GPT_RC(pr[i](p, full), GP_EIO);
        fclose(full);

        char tiny[16]; /* far smaller than any rendering */
        FILE *mem = fmemopen(tiny, sizeof tiny, "w");
        GPT_CHECK(mem);
        GPT_RC(sr[i](s, mem), GP_EIO);
        fclose(mem);
        mem = fmemopen(tiny, sizeof tiny, "w");
        GPT_CHECK(mem);
        GPT_RC(pr[i](p, mem), GP_EIO);
        fclose(mem);
    }
    /* Text from elsewhere that is not UTF-8 (a path cut inside a character, a stray byte):
       the JSON stays valid UTF-8, each bad byte U+FFFD, good characters kept. */
    gp_stats u = *s;
    u.fell_back = 1;
    snprintf(u.fallback_reason, sizeof u.fallback_reason, "caf\xC3\xA9 \xFF cut \xC3");
    size_t ulen;
    char *ut = capture_stats(gp_stats_json, &u, &ulen);
    check_json_text(ut, ulen);
    GPT_CHECK(strstr(ut, "\"caf\xC3\xA9 \\ufffd cut \\ufffd\"") != NULL);
    free(ut);
    /* Text fields from elsewhere with no NUL: each renders cut at its own size, never read
       past (the JSON of an unterminated backend_note read on into the next field). */
    gp_stats nt = *s;
    nt.fell_back = 1;
    memset(nt.fallback_reason, 'r', sizeof nt.fallback_reason);
    memset(nt.backend_note, 'n', sizeof nt.backend_note);
    char *ntt = capture_stats(gp_stats_json, &nt, &ulen);
    check_json_text(ntt, ulen);
    char note[sizeof nt.backend_note + 2]; /* "nnn...n": 159 of them, quotes around */
    note[0] = '"';
    memset(note + 1, 'n', sizeof nt.backend_note - 1);
    strcpy(note + sizeof nt.backend_note, "\"");
    GPT_CHECK(strstr(ntt, note) != NULL);
    free(ntt);
    /* An older, shorter snapshot renders: the fields it lacks read as 0. */
    gp_stats old = *s;
    old.struct_size = offsetof(gp_stats, latency_sum_ns);
    size_t len;
    char *t = capture_stats(gp_stats_json, &old, &len);
    check_json_text(t, len);
    GPT_CHECK(strstr(t, "\"max_batch\":0,") != NULL);
    free(t);
}

/* ---- layout ----------------------------------------------------------------------------- */

/* gp_stats as 0.1.0 declared it: GP_STATS_FIELDS only appends, so every field keeps its
   offset and programs built against the old header read the same bytes. */
typedef struct gp_stats_010 {
    size_t struct_size;
    gp_backend backend;
    int fell_back;
    char fallback_reason[160];
    uint64_t wall_ns, submitted, completed, completed_ok, timed_out, canceled, failed,
        rejected_full, batches, batch_items;
    uint64_t batch_hist[GP_HIST_BUCKETS];
    uint64_t close_reasons[6]; /* 0.1.0 had six reasons */
    uint64_t h2d_busy_ns, compute_busy_ns, d2h_busy_ns, callback_busy_ns, prep_busy_ns;
    uint64_t h2d_bytes, d2h_bytes, starved_ns, backpressure_ns, saturated_ns, enqueue_ns;
    uint64_t queue_wait_p50, queue_wait_p95, queue_wait_p99;
    uint64_t latency_p50, latency_p95, latency_p99, latency_max;
    uint64_t graph_replays, graph_eager;
    char graph_eager_reason[96];
    uint64_t latency_sum_ns, queue_wait_sum_ns, max_batch, capacity, item_in_bytes, item_out_bytes;
    uint32_t max_delay_us;
    int inflight, prep_workers, completion_workers, cuda_graphs;
    uint64_t delay_wait_ns;
} gp_stats_010;

#define GPT_SAME_OFFSET(f)                                                                         \
    _Static_assert(offsetof(gp_stats, f) == offsetof(gp_stats_010, f), "moved: " #f)
GPT_SAME_OFFSET(backend);
GPT_SAME_OFFSET(fell_back);
GPT_SAME_OFFSET(fallback_reason);
GPT_SAME_OFFSET(wall_ns);
GPT_SAME_OFFSET(submitted);
GPT_SAME_OFFSET(completed);
GPT_SAME_OFFSET(completed_ok);
GPT_SAME_OFFSET(timed_out);
GPT_SAME_OFFSET(canceled);
GPT_SAME_OFFSET(failed);
GPT_SAME_OFFSET(rejected_full);
GPT_SAME_OFFSET(batches);
GPT_SAME_OFFSET(batch_items);
GPT_SAME_OFFSET(batch_hist);
GPT_SAME_OFFSET(close_reasons);
GPT_SAME_OFFSET(h2d_busy_ns);
GPT_SAME_OFFSET(compute_busy_ns);
GPT_SAME_OFFSET(d2h_busy_ns);
GPT_SAME_OFFSET(callback_busy_ns);
GPT_SAME_OFFSET(prep_busy_ns);
GPT_SAME_OFFSET(h2d_bytes);
GPT_SAME_OFFSET(d2h_bytes);
GPT_SAME_OFFSET(starved_ns);
GPT_SAME_OFFSET(backpressure_ns);
GPT_SAME_OFFSET(saturated_ns);
GPT_SAME_OFFSET(enqueue_ns);
GPT_SAME_OFFSET(queue_wait_p50);
GPT_SAME_OFFSET(queue_wait_p95);
GPT_SAME_OFFSET(queue_wait_p99);
GPT_SAME_OFFSET(latency_p50);
GPT_SAME_OFFSET(latency_p95);
GPT_SAME_OFFSET(latency_p99);
GPT_SAME_OFFSET(latency_max);
GPT_SAME_OFFSET(graph_replays);
GPT_SAME_OFFSET(graph_eager);
GPT_SAME_OFFSET(graph_eager_reason);
GPT_SAME_OFFSET(latency_sum_ns);
GPT_SAME_OFFSET(queue_wait_sum_ns);
GPT_SAME_OFFSET(max_batch);
GPT_SAME_OFFSET(capacity);
GPT_SAME_OFFSET(item_in_bytes);
GPT_SAME_OFFSET(item_out_bytes);
GPT_SAME_OFFSET(max_delay_us);
GPT_SAME_OFFSET(inflight);
GPT_SAME_OFFSET(prep_workers);
GPT_SAME_OFFSET(completion_workers);
GPT_SAME_OFFSET(cuda_graphs);
GPT_SAME_OFFSET(delay_wait_ns);
_Static_assert(sizeof(gp_stats_010) <= offsetof(gp_stats, queue_wait_hist),
               "new fields come after the old ones");

/* A run with known totals: exact counters, bounded times, config echo, window arithmetic. */
static void test_counters(void) {
    gp_config c;
    gp_config_init(&c);
    c.backend = GP_BACKEND_HOST;
    c.item_in_bytes = 256;
    c.item_out_bytes = 32;
    c.max_batch = 32;
    c.inflight = 2;
    c.sim_compute_us = 200;
    c.prep_workers = 2;
    c.prep = slow_prep;
    c.compute = noop;
    gp_pipeline *p = gpt_create(&c);
    load *l = calloc(1, sizeof *l);
    GPT_CHECK(l);
    l->cb_sleep_us = 20;

    /* Nothing ran yet: an empty snapshot renders and says so. */
    gp_stats s = {.struct_size = sizeof s};
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    GPT_EQ(s.batches, 0);
    GPT_EQ(s.latency_p99, 0);
    gp_diagnosis d = {.struct_size = sizeof d};
    GPT_RC(gp_stats_diagnose(&s, &d), GP_OK);
    GPT_EQ(d.verdict, GP_VERDICT_NO_WORK);
    check_json(p);
    check_prometheus(p);

    /* Phase 1: 2 producers through submit, then an idle gap (the batcher starves). */
    load_start(l, p, c.item_in_bytes, 2);
    load_sleep_us(200e3);
    load_stop(l);
    load_sleep_us(50e3);
    uint64_t n1 = atomic_load(&l->submitted);
    GPT_CHECK(n1 > 100);
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    GPT_EQ(s.struct_size, sizeof s);
    GPT_EQ(s.backend, GP_BACKEND_HOST);
    GPT_EQ(s.fell_back, 0);
    GPT_EQ(s.submitted, n1);
    GPT_EQ(s.completed, n1);
    GPT_EQ(s.completed_ok, n1);
    GPT_EQ(s.timed_out + s.canceled + s.failed + s.rejected_full, 0);
    GPT_EQ(s.batch_items, n1);
    GPT_EQ(sum_u64(s.batch_hist, GP_HIST_BUCKETS), s.batches);
    GPT_EQ(s.batch_hist[0], 0);
    for (int b = 7; b < GP_HIST_BUCKETS; b++) /* max_batch 32 lives in bucket 6 */
        GPT_EQ(s.batch_hist[b], 0);
    GPT_EQ(sum_u64(s.close_reasons, GP_CLOSE_BYTES) + s.close_bytes, s.batches);
    GPT_EQ(s.h2d_bytes, n1 * c.item_in_bytes);
    GPT_EQ(s.d2h_bytes, n1 * c.item_out_bytes);
    /* One simulated compute engine: busy is at least the sum of the simulated times and at
       most the wall time. */
    GPT_CHECK(s.compute_busy_ns >= s.batches * 200000u * 99 / 100);
    GPT_CHECK(s.compute_busy_ns <= s.wall_ns);
    GPT_CHECK(s.h2d_busy_ns <= s.wall_ns && s.d2h_busy_ns <= s.wall_ns);
    GPT_CHECK(s.callback_busy_ns >= n1 * 20000u);
    GPT_EQ(s.prep_busy_ns, 0);
    GPT_CHECK(s.starved_ns >= 40000000u); /* the 50 ms gap */
    GPT_CHECK(s.enqueue_ns > 0);
    GPT_CHECK(s.launch_ns > 0 && s.launch_ns <= s.enqueue_ns); /* host: the hand-off only */
    GPT_CHECK(s.saturated_ns > 0); /* 2 producers outrun 2 slots at 200 us per batch */
    GPT_CHECK(s.latency_p50 <= s.latency_p95 && s.latency_p95 <= s.latency_p99 &&
              s.latency_p99 <= s.latency_max);
    GPT_CHECK(s.queue_wait_p50 <= s.queue_wait_p95 && s.queue_wait_p95 <= s.queue_wait_p99);
    GPT_CHECK(s.latency_p50 >= 200000u * 15 / 16); /* every item waited for one compute */
    GPT_CHECK(s.latency_sum_ns >= s.queue_wait_sum_ns);
    GPT_CHECK(s.latency_sum_ns / n1 >= 200000u);
    GPT_CHECK(s.queue_wait_p99 <= s.latency_max);
    GPT_EQ(s.max_batch, 32);
    GPT_EQ(s.capacity, c.capacity ? c.capacity : 256);
    GPT_EQ(s.item_in_bytes, 256);
    GPT_EQ(s.item_out_bytes, 32);
    GPT_EQ(s.inflight, 2);
    GPT_EQ(s.prep_workers, 2);
    GPT_EQ(s.completion_workers, 1);
    GPT_EQ(s.max_delay_us, 0);
    GPT_CHECK(s.wall_ns >= 250000000u);

    /* The latency histograms hold every item: callbacks for latency, dispatches for queue
       wait (the pipeline is idle now). */
    GPT_EQ(sum_u64(s.latency_hist, GP_LATENCY_BUCKETS), s.completed);
    GPT_EQ(sum_u64(s.queue_wait_hist, GP_LATENCY_BUCKETS), s.batch_items);

    /* Phase 2, as a window: prep path, deadlines in the past. The pipeline is idle at the
       mark and at the end, so the window is exactly the difference of the two snapshots. */
    gp_stats_mark *m = NULL;
    GPT_RC(gp_pipeline_mark(p, &m), GP_OK);
    GPT_CHECK(m != NULL);
    gp_stats before = {.struct_size = sizeof before};
    GPT_RC(gp_pipeline_stats(p, &before), GP_OK);
    enum { N2 = 60, NDEAD = 7 };
    for (int i = 0; i < N2; i++)
        GPT_RC(gp_pipeline_submit_prep(p, l->src, 256, 0, noop_done, NULL), GP_OK);
    for (int i = 0; i < NDEAD; i++)
        GPT_RC(gp_pipeline_submit_deadline(p, l->src, 256, 1, noop_done, NULL), GP_OK);
    GPT_RC(gp_pipeline_drain(p, 30 * 1000 * 1000), GP_OK);
    gp_stats all = {.struct_size = sizeof all};
    GPT_RC(gp_pipeline_stats(p, &all), GP_OK);
    gp_stats w = {.struct_size = sizeof w};
    GPT_RC(gp_pipeline_stats_since(p, m, &w), GP_OK);
    GPT_EQ(w.struct_size, sizeof w);
    GPT_EQ(w.submitted, N2 + NDEAD);
    GPT_EQ(w.completed, N2 + NDEAD);
    GPT_EQ(w.completed_ok, N2);
    GPT_EQ(w.timed_out, NDEAD);
    /* Expired items at the head never dispatch; one inside a span rides along. */
    GPT_CHECK(w.batch_items >= N2 && w.batch_items <= N2 + NDEAD);
    GPT_CHECK(w.prep_busy_ns >= N2 * 200000u);
    GPT_CHECK(w.wall_ns > 0 && w.wall_ns < s.wall_ns * 100);
    GPT_EQ(sum_u64(w.batch_hist, GP_HIST_BUCKETS), w.batches);
    GPT_EQ(sum_u64(w.latency_hist, GP_LATENCY_BUCKETS), w.completed);
    GPT_CHECK(w.latency_p50 > 0 && w.latency_p50 <= w.latency_max);
    GPT_EQ(all.completed, n1 + N2 + NDEAD);
    /* Every field a window subtracts equals all - before; the rest is the later snapshot's.
       (starved_ns grows while the batcher waits, between the snapshots and the mark.) */
    int checked = 0;
#define GPT_SUBTRACTS_META 0
#define GPT_SUBTRACTS_BACKEND 0
#define GPT_SUBTRACTS_FLAG 0
#define GPT_SUBTRACTS_TEXT 0
#define GPT_SUBTRACTS_WALL 0
#define GPT_SUBTRACTS_COUNT 1
#define GPT_SUBTRACTS_NS 1
#define GPT_SUBTRACTS_BYTES 1
#define GPT_SUBTRACTS_QUANTILE 0
#define GPT_SUBTRACTS_CONFIG 0
#define GPT_SUBTRACTS_SIZES 1
#define GPT_SUBTRACTS_REASONS 1
#define GPT_SUBTRACTS_LATENCY 1
#define GPT_WINDOW_FIELD(kind, type, name, dim, unit, prom, help)                                  \
    if (GPT_SUBTRACTS_##kind && strcmp(#name, "starved_ns") != 0) {                                \
        const uint64_t *wv = (const uint64_t *)&w.name, *av = (const uint64_t *)&all.name,         \
                       *bv = (const uint64_t *)&before.name;                                       \
        for (size_t k = 0; k < sizeof w.name / sizeof(type); k++)                                  \
            if (wv[k] != av[k] - bv[k]) {                                                          \
                fprintf(stderr, "window %s[%zu] = %llu, snapshots differ by %llu\n", #name, k,     \
                        (unsigned long long)wv[k], (unsigned long long)(av[k] - bv[k]));           \
                GPT_CHECK(0);                                                                      \
            }                                                                                      \
        checked++;                                                                                 \
    } else if (GPT_SUBTRACTS_##kind == 0 && strcmp(#name, "wall_ns") != 0 &&                       \
               strcmp(#name, "struct_size") != 0 && strncmp(#name, "queue_wait_p", 12) != 0 &&     \
               strncmp(#name, "latency_", 8) != 0) {                                               \
        GPT_CHECK(memcmp(&w.name, &all.name, sizeof w.name) == 0);                                 \
        checked++;                                                                                 \
    }
    GP_STATS_FIELDS(GPT_WINDOW_FIELD)
#undef GPT_WINDOW_FIELD
    GPT_CHECK(checked > 40);
    GPT_CHECK(w.wall_ns <= all.wall_ns - before.wall_ns + 50000000u);
    /* A mark may be used again, and by any number of calls. */
    gp_stats w2 = {.struct_size = sizeof w2};
    GPT_RC(gp_pipeline_stats_since(p, m, &w2), GP_OK);
    GPT_EQ(w2.completed, w.completed);
    GPT_CHECK(w2.wall_ns >= w.wall_ns);

    /* The window renders like a snapshot. */
    size_t wlen;
    char *wt = capture_stats(gp_stats_json, &w, &wlen);
    check_json_text(wt, wlen);
    GPT_CHECK(strstr(wt, "\"completed\":67,") != NULL);
    free(wt);
    wt = capture_stats(gp_stats_prometheus, &w, &wlen);
    check_prometheus_text(wt);
    free(wt);
    wt = capture_stats(gp_stats_report, &w, &wlen);
    GPT_CHECK(strstr(wt, "verdict: ") && strstr(wt, "counters: ") && strstr(wt, "submitted 67"));
    fputs(wt, stdout);
    free(wt);

    /* struct_size of the window: an older gp_stats gets only what it holds. */
    unsigned char wbuf[sizeof(gp_stats) + 16];
    memset(wbuf, 0xCD, sizeof wbuf);
    gp_stats *wold = (gp_stats *)wbuf;
    wold->struct_size = offsetof(gp_stats, latency_sum_ns);
    GPT_RC(gp_pipeline_stats_since(p, m, wold), GP_OK);
    GPT_EQ(wold->struct_size, offsetof(gp_stats, latency_sum_ns));
    GPT_EQ(wold->completed, w.completed);
    for (size_t i = offsetof(gp_stats, latency_sum_ns); i < sizeof wbuf; i++)
        GPT_EQ(wbuf[i], 0xCD);

    /* Bad arguments. */
    gp_stats_mark *none = (gp_stats_mark *)1;
    GPT_RC(gp_pipeline_mark(NULL, &none), GP_EINVAL);
    GPT_CHECK(none == NULL);
    GPT_RC(gp_pipeline_mark(p, NULL), GP_EINVAL);
    GPT_RC(gp_pipeline_stats_since(NULL, m, &w), GP_EINVAL);
    GPT_RC(gp_pipeline_stats_since(p, NULL, &w), GP_EINVAL);
    GPT_RC(gp_pipeline_stats_since(p, m, NULL), GP_EINVAL);
    w.struct_size = 3;
    GPT_RC(gp_pipeline_stats_since(p, m, &w), GP_EINVAL);
    w.struct_size = sizeof w + 8;
    GPT_RC(gp_pipeline_stats_since(p, m, &w), GP_EINVAL);
    w.struct_size = sizeof w;
    gp_config c2 = c;
    c2.prep_workers = 0;
    c2.prep = NULL;
    c2.spin_wait = 1;
    gp_pipeline *other = gpt_create(&c2);
    GPT_RC(gp_pipeline_stats_since(other, m, &w), GP_EINVAL); /* a mark of another pipeline */
    gp_stats so = {.struct_size = sizeof so};
    GPT_RC(gp_pipeline_stats(other, &so), GP_OK);
    GPT_EQ(so.spin_wait, 1); /* the configuration echo: this pipeline's, not p's */
    GPT_EQ(s.spin_wait, 0);
    GPT_RC(gp_pipeline_destroy(other, GP_DESTROY_DRAIN), GP_OK);
    gp_stats_mark_free(NULL);
    gp_stats_mark_free(m);

    /* struct_size: an older, shorter gp_stats is filled only as far as it reaches. */
    unsigned char buf[sizeof(gp_stats) + 16];
    memset(buf, 0xAB, sizeof buf);
    gp_stats *old = (gp_stats *)buf;
    old->struct_size = offsetof(gp_stats, latency_sum_ns);
    GPT_RC(gp_pipeline_stats(p, old), GP_OK);
    GPT_EQ(old->struct_size, offsetof(gp_stats, latency_sum_ns));
    GPT_EQ(old->completed, all.completed);
    for (size_t i = offsetof(gp_stats, latency_sum_ns); i < sizeof buf; i++)
        GPT_EQ(buf[i], 0xAB);
    old->struct_size = 3;
    GPT_RC(gp_pipeline_stats(p, old), GP_EINVAL);
    GPT_RC(gp_pipeline_stats(NULL, &all), GP_EINVAL);
    GPT_RC(gp_pipeline_stats_json(NULL, stdout), GP_EINVAL);
    GPT_RC(gp_pipeline_stats_json(p, NULL), GP_EINVAL);
    GPT_RC(gp_pipeline_stats_prometheus(NULL, stdout), GP_EINVAL);
    GPT_RC(gp_pipeline_report(p, NULL), GP_EINVAL);

    check_json(p);
    check_prometheus(p);
    GPT_RC(gp_pipeline_report(p, stdout), GP_OK);
    GPT_RC(gp_pipeline_stats_prometheus(p, stdout), GP_OK);
    test_renderer_errors(p, &all);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    free(l);
}

/* Back-pressure, rejections, failures: a slow single slot behind a small ring. */
static void test_pressure(void) {
    gp_config c;
    gp_config_init(&c);
    c.backend = GP_BACKEND_HOST;
    c.item_in_bytes = c.item_out_bytes = 64;
    c.max_batch = 4;
    c.capacity = 8;
    c.inflight = 1;
    c.sim_compute_us = 2000;
    c.compute = fail_first_batch;
    gp_pipeline *p = gpt_create(&c);
    load *l = calloc(1, sizeof *l);
    GPT_CHECK(l);
    load_start(l, p, 64, 2); /* blocking submits against 8 slots */
    load_sleep_us(100e3);
    load_stop(l);
    gp_stats s = {.struct_size = sizeof s};
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    GPT_CHECK(s.backpressure_ns > 50000000u); /* two producers blocked most of 100 ms */
    GPT_CHECK(s.saturated_ns > 0);
    GPT_EQ(s.failed, s.completed - s.completed_ok);
    GPT_CHECK(s.failed >= 1 && s.failed <= 4); /* the first batch failed, only it */
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);

    c.full_policy = GP_FULL_FAIL;
    c.compute = noop;
    p = gpt_create(&c);
    int rejected = 0;
    for (int i = 0; i < 64; i++)
        rejected += gp_pipeline_submit(p, l->src, 64, noop_done, NULL) == GP_EAGAIN;
    GPT_CHECK(rejected > 0);
    GPT_RC(gp_pipeline_drain(p, 30 * 1000 * 1000), GP_OK);
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    GPT_EQ(s.rejected_full, rejected);
    GPT_EQ(s.submitted, 64 - rejected);
    GPT_EQ(s.completed, 64 - rejected);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    free(l);
}

/* A wait in progress counts: a batch held for a long max_delay_us, a batcher starved. */
static void test_waits_in_progress(void) {
    gp_config c;
    gp_config_init(&c);
    c.backend = GP_BACKEND_HOST;
    c.item_in_bytes = c.item_out_bytes = 64;
    c.max_delay_us = 200 * 1000;
    c.compute = noop;
    gp_pipeline *p = gpt_create(&c);
    unsigned char item[64] = {0};
    load_sleep_us(30e3);
    gp_stats s = {.struct_size = sizeof s};
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    GPT_CHECK(s.starved_ns >= 20000000u); /* still waiting for the first item */
    GPT_RC(gp_pipeline_submit(p, item, sizeof item, noop_done, NULL), GP_OK);
    load_sleep_us(30e3);
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    GPT_EQ(s.batches, 0);                    /* held for the delay */
    GPT_CHECK(s.delay_wait_ns >= 20000000u); /* and counted while held */
    GPT_RC(gp_pipeline_drain(p, 30 * 1000 * 1000), GP_OK);
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    GPT_EQ(s.close_reasons[GP_CLOSE_FLUSH], 1);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
}

/* ---- the clock and the order of counters (docs/DESIGN.md §7) ------------------------------- */

static int slow_setup(void *user, const gp_batch *b) {
    (void)user, (void)b;
    load_sleep_us(300e3);
    return GP_OK;
}

typedef struct one_item {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} one_item;

static void slow_done(void *user, int status, const void *out, size_t n) {
    (void)status, (void)out, (void)n;
    one_item *o = user;
    load_sleep_us(40e3); /* the callback's own run: not latency */
    pthread_mutex_lock(&o->mu);
    o->done = 1;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

/* wall_ns starts when create has done its setup (300 ms per slot here) and stops when shutdown
   ends the threads; latency ends as the callback is called, not when it returns. */
static void test_clock(void) {
    gp_config c;
    gp_config_init(&c);
    c.backend = GP_BACKEND_HOST;
    c.item_in_bytes = c.item_out_bytes = 64;
    c.inflight = 2;
    c.compute = noop;
    c.compute_setup = slow_setup;
    gp_pipeline *p = gpt_create(&c);
    gp_stats s = {.struct_size = sizeof s};
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    printf("wall_ns right after a create with 2 x 300 ms of setup: %.1f ms\n", s.wall_ns / 1e6);
    GPT_CHECK(s.wall_ns < 250000000u); /* the setup's 600 ms are not the run's */

    unsigned char item[64] = {0};
    one_item o = {.done = 0};
    GPT_CHECK(pthread_mutex_init(&o.mu, NULL) == 0 && pthread_cond_init(&o.cv, NULL) == 0);
    for (int i = 0; i < 9; i++) { /* one at a time, each callback 40 ms */
        o.done = 0;
        GPT_RC(gp_pipeline_submit(p, item, sizeof item, slow_done, &o), GP_OK);
        pthread_mutex_lock(&o.mu);
        while (!o.done)
            pthread_cond_wait(&o.cv, &o.mu);
        pthread_mutex_unlock(&o.mu);
    }
    GPT_RC(gp_pipeline_drain(p, 30 * 1000 * 1000), GP_OK);
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    printf("9 items one at a time, each callback sleeping 40 ms: latency p50 %.2f ms\n",
           s.latency_p50 / 1e6);
    GPT_EQ(s.completed, 9);
    GPT_CHECK(s.latency_p50 < 20000000u);

    GPT_RC(gp_pipeline_shutdown(p, GP_DESTROY_DRAIN), GP_OK);
    gp_stats a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
    GPT_RC(gp_pipeline_stats(p, &a), GP_OK);
    load_sleep_us(50e3);
    GPT_RC(gp_pipeline_stats(p, &b), GP_OK);
    GPT_EQ(a.wall_ns, b.wall_ns); /* stopped with the threads */
    GPT_EQ(a.starved_ns, b.starved_ns);
    GPT_CHECK(a.wall_ns >= 9 * 40000000ull);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    pthread_mutex_destroy(&o.mu);
    pthread_cond_destroy(&o.cv);
}

/* Padding is reported from computes of several slots at once: no snapshot may see more useful
   elements than elements (a negative padding share). */
static int pad_compute(void *user, const gp_batch *b) {
    (void)user;
    for (int i = 0; i < 2000; i++)
        GPT_RC(gp_batch_report_padding(b, 1000000000, 1000000001), GP_OK);
    return GP_OK;
}

static void test_padding_order(void) {
    gp_config c;
    gp_config_init(&c);
    c.backend = GP_BACKEND_HOST;
    c.item_in_bytes = c.item_out_bytes = 8;
    c.max_batch = 1;
    c.inflight = 2;
    c.compute = pad_compute;
    gp_pipeline *p = gpt_create(&c);
    static load l;
    memset(&l, 0, sizeof l);
    load_start(&l, p, 8, 2);
    uint64_t snaps = 0;
    gp_stats s = {.struct_size = sizeof s};
    double t_end = gpt_now() + 1.5;
    do {
        GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
        GPT_CHECK(s.pad_useful <= s.pad_total);
        snaps++;
    } while (snaps < 200000 && gpt_now() < t_end);
    load_stop(&l);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    printf("padding: %llu snapshots while two slots reported, useful <= total in each\n",
           (unsigned long long)snaps);
}

/* AUTO without a usable GPU: the fallback reason (free text) goes through every rendering. */
static void test_fallback_renderings(void) {
    gp_config c;
    gp_config_init(&c);
    c.item_in_bytes = c.item_out_bytes = 64;
    c.compute = noop;
    gp_pipeline *p = gpt_create(&c);
    gp_stats s = {.struct_size = sizeof s};
    GPT_RC(gp_pipeline_stats(p, &s), GP_OK);
    if (s.backend == GP_BACKEND_HOST) {
        GPT_EQ(s.fell_back, 1);
        GPT_CHECK(s.fallback_reason[0] != '\0');
    }
    unsigned char item[64] = {0};
    for (int i = 0; i < 10; i++)
        GPT_RC(gp_pipeline_submit(p, item, sizeof item, noop_done, NULL), GP_OK);
    GPT_RC(gp_pipeline_drain(p, 30 * 1000 * 1000), GP_OK);
    check_json(p);
    check_prometheus(p);
    size_t len;
    char *t = capture(gp_pipeline_report, p, &len);
    if (s.fell_back) GPT_CHECK(strstr(t, "verdict: gpu-not-used") && strstr(t, s.fallback_reason));
    free(t);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_hist();
    test_counters();
    test_pressure();
    test_waits_in_progress();
    test_clock();
    test_padding_order();
    test_fallback_renderings();
    printf("stats: ok\n");
    return 0;
}

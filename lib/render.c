/*
 * The renderings of a snapshot or a window: the doctor's report (text for people), one JSON
 * object, and Prometheus text exposition. The field-by-field parts walk the field list
 * (GP_STATS_FIELDS as data, stats.c), so a field added there shows up in every rendering.
 * Everything here writes only to the FILE * it is given, and says GP_EIO when that failed.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fmt.h"
#include "pipeline.h"
#include "stats.h"

/* Flush so a write error inside the FILE buffer surfaces here, not at the caller's fclose. */
static int finish(FILE *f) {
    int flushed = fflush(f);
    return flushed != 0 || ferror(f) ? GP_EIO : GP_OK;
}

/* JSON has no NaN/Inf; derived numbers are finite by construction, this keeps it so. */
static double fin(double v) {
    return isfinite(v) ? v : 0.0;
}

static const char *field_text(const gp_stats *s, const gp__stat_field *f) {
    return (const char *)s + f->offset;
}

/* ---- JSON ------------------------------------------------------------------------------- */

/* Bytes of the well-formed UTF-8 sequence at c (RFC 3629: no overlong form, no surrogate,
   nothing above U+10FFFF), 0 if there is none. */
static int utf8_len(const unsigned char *c) {
    int n = c[0] < 0x80   ? 1
            : c[0] < 0xC2 ? 0
            : c[0] < 0xE0 ? 2
            : c[0] < 0xF0 ? 3
            : c[0] < 0xF5 ? 4
                          : 0;
    unsigned lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c[0] == 0xE0) lo = 0xA0;
    if (c[0] == 0xED) hi = 0x9F;
    if (c[0] == 0xF0) lo = 0x90;
    if (c[0] == 0xF4) hi = 0x8F;
    for (int k = 1; k < n; k++)
        if (c[k] < (k == 1 ? lo : 0x80) || c[k] > (k == 1 ? hi : 0xBF)) return 0;
    return n;
}

/* `s` as a JSON string literal, escaped (gpupipe.h: "one JSON object"): text from elsewhere (a path
   in a fallback reason, a device name) may hold bytes that are not UTF-8; each such byte is U+FFFD.
 */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c;) {
        int n = utf8_len(c);
        if (n == 0) {
            fputs("\\ufffd", f);
            n = 1;
        } else if (*c == '"' || *c == '\\') {
            fprintf(f, "\\%c", *c);
        } else if (*c < 0x20 || *c == 0x7F) {
            fprintf(f, "\\u%04x", *c);
        } else {
            fwrite(c, 1, (size_t)n, f);
        }
        c += n;
    }
    fputc('"', f);
}

static void json_field(FILE *f, const gp_stats *s, const gp__stat_field *fd, int *first) {
    fprintf(f, "%s\"%s\":", *first ? "" : ",", fd->name);
    *first = 0;
    switch (fd->kind) {
    case GP__STAT_BACKEND:
        json_str(f, gp_backend_name(s->backend));
        break;
    case GP__STAT_FLAG:
        fputs(gp__stat_u64(s, fd, 0) ? "true" : "false", f);
        break;
    case GP__STAT_TEXT:
        json_str(f, field_text(s, fd));
        break;
    case GP__STAT_SIZES:
    case GP__STAT_LATENCY:
        fputc('[', f);
        for (size_t k = 0; k < fd->count; k++)
            fprintf(f, "%s%" PRIu64, k ? "," : "", gp__stat_u64(s, fd, k));
        fputc(']', f);
        break;
    case GP__STAT_REASONS: /* the array, then the reasons appended later as their own fields */
        fputc('{', f);
        for (size_t k = 0; k < fd->count; k++)
            fprintf(f, "%s\"%s\":%" PRIu64, k ? "," : "", gp_close_reason_name((gp_close_reason)k),
                    gp__stat_u64(s, fd, k));
        fprintf(f, ",\"%s\":%" PRIu64 "}", gp_close_reason_name(GP_CLOSE_BYTES), s->close_bytes);
        break;
    case GP__STAT_META:
    case GP__STAT_WALL:
    case GP__STAT_COUNT:
    case GP__STAT_NS:
    case GP__STAT_BYTES:
    case GP__STAT_QUANTILE:
    case GP__STAT_CONFIG:
        fprintf(f, "%" PRIu64, gp__stat_u64(s, fd, 0));
        break;
    }
}

static void write_json(const gp_stats *s, FILE *f) {
    gp_diagnosis d;
    gp__diagnose(s, &d);
    int first = 1;
    fputc('{', f);
    for (size_t i = 0; i < gp__stat_nfields; i++) {
        const gp__stat_field *fd = &gp__stat_fields[i];
        if (fd->kind != GP__STAT_META && fd->kind != GP__STAT_CONFIG) json_field(f, s, fd, &first);
    }
    fputs(",\"config\":{", f);
    first = 1;
    for (size_t i = 0; i < gp__stat_nfields; i++)
        if (gp__stat_fields[i].kind == GP__STAT_CONFIG)
            json_field(f, s, &gp__stat_fields[i], &first);
    static const double le[GP_LATENCY_BUCKETS - 1] = GP_LATENCY_BOUNDS_S;
    fputs("},\"latency_bounds_s\":[", f);
    for (int b = 0; b < GP_LATENCY_BUCKETS - 1; b++)
        fprintf(f, "%s%g", b ? "," : "", le[b]);
    fprintf(f,
            "],\"derived\":{\"items_per_s\":%.6g,\"mean_batch\":%.6g,\"h2d_busy\":%.6g,"
            "\"compute_busy\":%.6g,\"d2h_busy\":%.6g,\"callback_util\":%.6g,\"prep_util\":%.6g,"
            "\"enqueue_busy\":%.6g,\"starved\":%.6g,\"delay_wait\":%.6g,\"saturated\":%.6g,"
            "\"backpressure\":%.6g,"
            "\"enqueue_us_per_batch\":%.6g,\"compute_us_per_batch\":%.6g,"
            "\"h2d_gbps\":%.6g,\"d2h_gbps\":%.6g,\"wall_s\":%.6g,\"device_items_per_s\":%.6g,"
            "\"padding\":%.6g}",
            fin(d.items_per_s), fin(d.mean_batch), fin(d.h2d), fin(d.compute), fin(d.d2h),
            fin(d.callbacks), fin(d.prep), fin(d.enqueue), fin(d.starved), fin(d.delay_wait),
            fin(d.saturated), fin(d.backpressure), fin(d.batch_enqueue_us), fin(d.batch_compute_us),
            fin(d.h2d_gbps), fin(d.d2h_gbps), fin(d.wall_s), fin(d.device_items_per_s),
            fin(d.padding));
    fprintf(f, ",\"verdict\":\"%s\",\"bottleneck\":\"%s\",\"why\":", gp_verdict_name(d.verdict),
            gp_verdict_name(d.bottleneck));
    json_str(f, d.why);
    fputs(",\"knob\":", f);
    json_str(f, d.knob);
    fputs("}\n", f);
}

/* ---- Prometheus text exposition (format 0.0.4) ------------------------------------------ */

/* The family of a `prom` entry: up to the labels. */
static size_t family_len(const char *prom) {
    return strcspn(prom, "{");
}

static int same_family(const char *a, const char *b) {
    size_t n = family_len(a);
    return n == family_len(b) && strncmp(a, b, n) == 0;
}

static const char *prom_type(gp__stat_kind k) {
    switch (k) {
    case GP__STAT_WALL:
        return "gauge";
    case GP__STAT_SIZES:
    case GP__STAT_LATENCY:
        return "histogram";
    case GP__STAT_META:
    case GP__STAT_BACKEND:
    case GP__STAT_FLAG:
    case GP__STAT_TEXT:
    case GP__STAT_COUNT:
    case GP__STAT_NS:
    case GP__STAT_BYTES:
    case GP__STAT_QUANTILE:
    case GP__STAT_CONFIG:
    case GP__STAT_REASONS:
        break;
    }
    return "counter";
}

/* HELP and TYPE for the family starting at field i. A labelled family's help lists each
   member: "stage=\"h2d\": union of ..., stage=\"compute\": ..." (HELP escapes only \ and
   newlines, neither of which a help text holds). */
static void prom_head(FILE *f, size_t i) {
    const gp__stat_field *fd = &gp__stat_fields[i];
    int n = (int)family_len(fd->prom);
    fprintf(f, "# HELP gpupipe_%.*s ", n, fd->prom);
    if (fd->prom[n] != '{') {
        fprintf(f, "%s.", fd->help);
    } else {
        for (size_t j = i; j < gp__stat_nfields; j++) {
            const gp__stat_field *m = &gp__stat_fields[j];
            if (!m->prom[0]) continue;
            if (!same_family(m->prom, fd->prom)) break;
            const char *lab = m->prom + n + 1;
            fprintf(f, "%s%.*s: %s", j > i ? "; " : "", (int)strcspn(lab, "}"), lab, m->help);
        }
        fputc('.', f);
    }
    fprintf(f, "\n# TYPE gpupipe_%.*s %s\n", n, fd->prom, prom_type(fd->kind));
}

/* Histogram samples: cumulative buckets, +Inf equal to _count (the sum of the buckets, so the
   samples agree even when a counter moved between reads). */
static void prom_hist_tail(FILE *f, const char *name, uint64_t total, double sum) {
    fprintf(f, "gpupipe_%s_bucket{le=\"+Inf\"} %" PRIu64 "\ngpupipe_%s_sum %.9g\n", name, total,
            name, sum);
    fprintf(f, "gpupipe_%s_count %" PRIu64 "\n", name, total);
}

static void prom_sizes(FILE *f, const gp_stats *s, const gp__stat_field *fd) {
    uint64_t cum = 0;
    for (size_t b = 0; b < fd->count; b++) {
        cum += gp__stat_u64(s, fd, b);
        /* bucket b holds sizes up to 2^b - 1; beyond 2^21 items a batch is not plausible */
        if (b >= 1 && b <= 21)
            fprintf(f, "gpupipe_%s_bucket{le=\"%" PRIu64 "\"} %" PRIu64 "\n", fd->prom,
                    (UINT64_C(1) << b) - 1, cum);
    }
    prom_hist_tail(f, fd->prom, cum, (double)s->batch_items);
}

static void prom_latency(FILE *f, const gp_stats *s, const gp__stat_field *fd) {
    static const double le[GP_LATENCY_BUCKETS - 1] = GP_LATENCY_BOUNDS_S;
    uint64_t cum = 0;
    for (size_t b = 0; b < fd->count; b++) {
        cum += gp__stat_u64(s, fd, b);
        if (b < GP_LATENCY_BUCKETS - 1)
            fprintf(f, "gpupipe_%s_bucket{le=\"%g\"} %" PRIu64 "\n", fd->prom, le[b], cum);
    }
    /* The sum lives in "<stem>_sum_ns" next to "<stem>_hist". */
    char sum_name[64];
    snprintf(sum_name, sizeof sum_name, "%.*s_sum_ns", (int)(strlen(fd->name) - strlen("_hist")),
             fd->name);
    const gp__stat_field *sum = gp__stat_find(sum_name);
    prom_hist_tail(f, fd->prom, cum, sum ? (double)gp__stat_u64(s, sum, 0) / 1e9 : 0.0);
}

static void prom_sample(FILE *f, const gp_stats *s, const gp__stat_field *fd) {
    switch (fd->kind) {
    case GP__STAT_WALL:
    case GP__STAT_NS: /* in seconds */
        fprintf(f, "gpupipe_%s %.9g\n", fd->prom, (double)gp__stat_u64(s, fd, 0) / 1e9);
        break;
    case GP__STAT_REASONS:
        for (size_t k = 0; k < fd->count; k++)
            fprintf(f, "gpupipe_%s{reason=\"%s\"} %" PRIu64 "\n", fd->prom,
                    gp_close_reason_name((gp_close_reason)k), gp__stat_u64(s, fd, k));
        fprintf(f, "gpupipe_%s{reason=\"%s\"} %" PRIu64 "\n", fd->prom,
                gp_close_reason_name(GP_CLOSE_BYTES), s->close_bytes);
        break;
    case GP__STAT_SIZES:
        prom_sizes(f, s, fd);
        break;
    case GP__STAT_LATENCY:
        prom_latency(f, s, fd);
        break;
    case GP__STAT_META:
    case GP__STAT_BACKEND:
    case GP__STAT_FLAG:
    case GP__STAT_TEXT:
    case GP__STAT_COUNT:
    case GP__STAT_BYTES:
    case GP__STAT_QUANTILE:
    case GP__STAT_CONFIG:
        fprintf(f, "gpupipe_%s %" PRIu64 "\n", fd->prom, gp__stat_u64(s, fd, 0));
        break;
    }
}

static void write_prometheus(const gp_stats *s, FILE *f) {
    gp_diagnosis d;
    gp__diagnose(s, &d);
    fputs("# HELP gpupipe_info Backend that runs (host or cuda), whether AUTO fell back, library "
          "version.\n# TYPE gpupipe_info gauge\n",
          f);
    fprintf(f, "gpupipe_info{backend=\"%s\",fell_back=\"%d\",version=\"%s\"} 1\n",
            gp_backend_name(s->backend), s->fell_back, gp_version());
    const char *prev = NULL;
    for (size_t i = 0; i < gp__stat_nfields; i++) {
        const gp__stat_field *fd = &gp__stat_fields[i];
        if (!fd->prom[0]) continue;
        if (!prev || !same_family(prev, fd->prom)) prom_head(f, i);
        prev = fd->prom;
        prom_sample(f, s, fd);
    }
    fprintf(f,
            "# HELP gpupipe_compute_busy_ratio Compute busy time over wall time (0..1).\n"
            "# TYPE gpupipe_compute_busy_ratio gauge\ngpupipe_compute_busy_ratio %.9g\n",
            fin(d.compute));
    fprintf(f,
            "# HELP gpupipe_verdict The doctor's verdict (1 for the current one); see "
            "gp_stats_diagnose.\n# TYPE gpupipe_verdict gauge\n"
            "gpupipe_verdict{verdict=\"%s\",bottleneck=\"%s\"} 1\n",
            gp_verdict_name(d.verdict), gp_verdict_name(d.bottleneck));
}

/* ---- the report ------------------------------------------------------------------------- */

/* Every counter, byte count and accumulated time, wrapped: the evidence in full. */
static void report_counters(const gp_stats *s, FILE *f) {
    int col = (int)strlen("counters:"), first = 1;
    fputs("counters:", f);
    for (size_t i = 0; i < gp__stat_nfields; i++) {
        const gp__stat_field *fd = &gp__stat_fields[i];
        char item[96];
        uint64_t v = gp__stat_u64(s, fd, 0);
        if (fd->kind == GP__STAT_COUNT)
            snprintf(item, sizeof item, "%s %" PRIu64, fd->name, v);
        else if (fd->kind == GP__STAT_NS)
            snprintf(item, sizeof item, "%s %s", fd->name, gp__fmt_ns((double)v).s);
        else if (fd->kind == GP__STAT_BYTES)
            snprintf(item, sizeof item, "%s %s", fd->name, gp__fmt_bytes((double)v).s);
        else
            continue;
        int n = (int)strlen(item);
        if (!first) fputc(',', f);
        if (col + 2 + n > 100) {
            fputs("\n ", f);
            col = 1;
        }
        fprintf(f, " %s", item);
        col += n + 2;
        first = 0;
    }
    fputc('\n', f);
}

static void write_report(const gp_stats *s, FILE *f) {
    gp_diagnosis d;
    gp__diagnose(s, &d);

    fprintf(f, "gpupipe %s report: backend %s", gp_version(), gp_backend_name(s->backend));
    if (s->fell_back)
        fprintf(f, " (AUTO fell back: no usable GPU)");
    else if (s->backend == GP_BACKEND_HOST)
        fprintf(f, " (requested: no GPU is used)");
    fprintf(f, ", %s items in %s\n", gp__fmt_count((double)s->completed).s,
            gp__fmt_ns((double)s->wall_ns).s);
    if (s->fell_back) {
        fprintf(f, "verdict: %s - %s\n", gp_verdict_name(GP_VERDICT_GPU_NOT_USED),
                gp__verdict_title(GP_VERDICT_GPU_NOT_USED));
        fprintf(f,
                "  why:  backend AUTO found no usable GPU: %s. Every number below comes from "
                "the host backend.\n",
                s->fallback_reason[0] ? s->fallback_reason : "no reason recorded");
        /* The reasons backends.c gives: a build without CUDA, an installation without its
           module, or (else) a device or driver the runtime refused. */
        const char *r = s->fallback_reason;
        fprintf(f,
                "  knob: %s; set backend=GP_BACKEND_CUDA to fail at create instead of falling "
                "back\n",
                strstr(r, "no CUDA backend")
                    ? "build with CUDA (cmake -DGP_WITH_CUDA=ON, with the toolkit installed)"
                : strstr(r, "CUDA module")
                    ? "install the CUDA module (libgpupipe-cuda.so) beside libgpupipe"
                    : "make the device visible (nvidia-smi, CUDA_VISIBLE_DEVICES, driver "
                      "version)");
        fprintf(f, "pipeline bottleneck on the host backend: %s - %s\n",
                gp_verdict_name(d.bottleneck), gp__verdict_title(d.bottleneck));
    } else {
        fprintf(f, "verdict: %s - %s\n", gp_verdict_name(d.bottleneck),
                gp__verdict_title(d.bottleneck));
    }
    fprintf(f, "  why:  %s\n  knob: %s\n", d.why, d.knob);

    fprintf(f, "numbers:\n");
    fprintf(f,
            "  items     %" PRIu64 " submitted, %" PRIu64 " done (ok %" PRIu64
            ", timed out %" PRIu64 ", canceled %" PRIu64 ", failed %" PRIu64 "), %" PRIu64
            " rejected (ring full); %s items/s\n",
            s->submitted, s->completed, s->completed_ok, s->timed_out, s->canceled, s->failed,
            s->rejected_full, gp__fmt_count(d.items_per_s).s);
    fprintf(f,
            "  batches   %" PRIu64 ", mean %.1f items (max_batch %" PRIu64 ", max_delay_us %u, "
            "inflight %d%s); closed by",
            s->batches, d.mean_batch, s->max_batch, s->max_delay_us, s->inflight,
            s->spin_wait ? ", spin_wait on" : "");
    for (int i = 0; i < GP_CLOSE_BYTES; i++)
        fprintf(f, " %s %" PRIu64 ",", gp_close_reason_name((gp_close_reason)i),
                s->close_reasons[i]);
    fprintf(f, " %s %" PRIu64 "\n", gp_close_reason_name(GP_CLOSE_BYTES), s->close_bytes);
    fprintf(f, "  sizes    ");
    int any = 0;
    for (int b = 1; b < GP_HIST_BUCKETS; b++) {
        if (!s->batch_hist[b]) continue;
        uint64_t lo = UINT64_C(1) << (b - 1), hi = (UINT64_C(1) << b) - 1;
        if (lo == hi)
            fprintf(f, " %" PRIu64 ":%" PRIu64, lo, s->batch_hist[b]);
        else
            fprintf(f, " %" PRIu64 "-%" PRIu64 ":%" PRIu64, lo, hi, s->batch_hist[b]);
        any = 1;
    }
    fprintf(f, "%s\n", any ? "" : " -");
    fprintf(f, "  latency   p50 %s, p95 %s, p99 %s, max %s (submit -> callback)\n",
            gp__fmt_ns((double)s->latency_p50).s, gp__fmt_ns((double)s->latency_p95).s,
            gp__fmt_ns((double)s->latency_p99).s, gp__fmt_ns((double)s->latency_max).s);
    fprintf(f, "  queued    p50 %s, p95 %s, p99 %s (submit -> dispatch)\n",
            gp__fmt_ns((double)s->queue_wait_p50).s, gp__fmt_ns((double)s->queue_wait_p95).s,
            gp__fmt_ns((double)s->queue_wait_p99).s);
    fprintf(f,
            "  device    busy h2d %.1f%%, compute %.1f%%, d2h %.1f%%; %s of compute per batch; "
            "h2d %.3f GB/s, d2h %.3f GB/s\n",
            gp__pct(d.h2d), gp__pct(d.compute), gp__pct(d.d2h),
            gp__fmt_ns(d.batch_compute_us * 1e3).s, d.h2d_gbps, d.d2h_gbps);
    fprintf(f,
            "  batcher   starved %.1f%%, holding for max_delay_us %.1f%%, waiting for a slot "
            "%.1f%%, enqueue %s per batch (%.1f%% of wall; the compute's launch %s of it)\n",
            gp__pct(d.starved), gp__pct(d.delay_wait), gp__pct(d.saturated),
            gp__fmt_ns(d.batch_enqueue_us * 1e3).s, gp__pct(d.enqueue),
            gp__fmt_ns(s->batches ? (double)s->launch_ns / (double)s->batches : 0).s);
    fprintf(f, "  workers   callbacks %.1f%% of %d, prep ", gp__pct(d.callbacks),
            s->completion_workers);
    if (s->prep_workers)
        fprintf(f, "%.1f%% of %d", gp__pct(d.prep), s->prep_workers);
    else
        fprintf(f, "off");
    fprintf(f, "; producers blocked on a full ring %.2f s per s\n", d.backpressure);
    if (s->backend == GP_BACKEND_CUDA)
        fprintf(f, "  graphs    %" PRIu64 " replays, %" PRIu64 " eager%s%s\n", s->graph_replays,
                s->graph_eager, s->graph_eager_reason[0] ? ": " : "", s->graph_eager_reason);
    report_counters(s, f);
}

/* ---- entry points ----------------------------------------------------------------------- */

typedef void (*writer)(const gp_stats *s, FILE *f);

static int render(const gp_stats *s, FILE *f, writer w) {
    if (!f || !gp__stats_size_ok(s)) return GP_EINVAL;
    gp_stats full;
    gp__stats_widen(s, &full);
    w(&full, f);
    return finish(f);
}

int gp_stats_report(const gp_stats *s, FILE *f) {
    return render(s, f, write_report);
}

int gp_stats_json(const gp_stats *s, FILE *f) {
    return render(s, f, write_json);
}

int gp_stats_prometheus(const gp_stats *s, FILE *f) {
    return render(s, f, write_prometheus);
}

static int render_pipeline(gp_pipeline *p, FILE *f, writer w) {
    gp_stats s = {.struct_size = sizeof s};
    if (!p) return GP_EINVAL;
    if (!f) return GP__ERR(&p->err, GP_EINVAL, "rendering the stats: the FILE is NULL");
    int rc = gp_pipeline_stats(p, &s);
    if (rc == GP_OK && (rc = render(&s, f, w)) == GP_EIO)
        GP__ERR(&p->err, GP_EIO, "rendering the stats: the stream reported a write error");
    return rc;
}

int gp_pipeline_report(gp_pipeline *p, FILE *f) {
    return render_pipeline(p, f, write_report);
}

int gp_pipeline_stats_json(gp_pipeline *p, FILE *f) {
    return render_pipeline(p, f, write_json);
}

int gp_pipeline_stats_prometheus(gp_pipeline *p, FILE *f) {
    return render_pipeline(p, f, write_prometheus);
}

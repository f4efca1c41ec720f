/*
 * Stats renderings (JSON, Prometheus text exposition) and the doctor: gp__diagnose turns a
 * snapshot into a verdict (the bottleneck, the numbers that prove it, the knob to turn) and
 * gp_pipeline_report prints it with the numbers behind it. Everything here writes only to the
 * FILE * it is given.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pipeline.h"

/* A resource busy at least this fraction of wall time is saturated: it is the bottleneck. */
#define SATURATED 0.70
/* The batcher waited for a free slot at least this fraction of wall time. */
#define SLOTS_FULL 0.50
/* The batcher found no item at least this fraction of wall time. */
#define STARVED 0.40

/* ---- small formatting helpers ----------------------------------------------------------- */

typedef struct fmtbuf {
    char s[24];
} fmtbuf;

static fmtbuf fmt_ns(double ns) {
    fmtbuf b;
    if (ns < 1e3)
        snprintf(b.s, sizeof b.s, "%.0f ns", ns);
    else if (ns < 1e6)
        snprintf(b.s, sizeof b.s, "%.*f us", ns < 1e4 ? 2 : ns < 1e5 ? 1 : 0, ns / 1e3);
    else if (ns < 1e9)
        snprintf(b.s, sizeof b.s, "%.*f ms", ns < 1e7 ? 2 : ns < 1e8 ? 1 : 0, ns / 1e6);
    else
        snprintf(b.s, sizeof b.s, "%.2f s", ns / 1e9);
    return b;
}

static fmtbuf fmt_count(double v) {
    fmtbuf b;
    if (v < 1e3)
        snprintf(b.s, sizeof b.s, "%.0f", v);
    else if (v < 1e6)
        snprintf(b.s, sizeof b.s, "%.*fk", v < 1e4 ? 2 : v < 1e5 ? 1 : 0, v / 1e3);
    else if (v < 1e9)
        snprintf(b.s, sizeof b.s, "%.*fM", v < 1e7 ? 2 : v < 1e8 ? 1 : 0, v / 1e6);
    else
        snprintf(b.s, sizeof b.s, "%.2fG", v / 1e9);
    return b;
}

static fmtbuf fmt_bytes(double v) {
    fmtbuf b;
    if (v < 1024)
        snprintf(b.s, sizeof b.s, "%.0f B", v);
    else if (v < 1024.0 * 1024)
        snprintf(b.s, sizeof b.s, "%.1f KiB", v / 1024);
    else
        snprintf(b.s, sizeof b.s, "%.1f MiB", v / (1024.0 * 1024));
    return b;
}

static double pct(double f) {
    return 100.0 * f;
}

/* ---- the doctor ------------------------------------------------------------------------- */

static const struct {
    const char *name, *title;
} verdicts[GP__V_COUNT_] = {
    [GP__V_NO_WORK] = {"no-work", "no batch has run yet"},
    [GP__V_GPU_NOT_USED] = {"gpu-not-used", "the GPU is not used: running on the host backend"},
    [GP__V_PRODUCERS] = {"producers", "producers starve the device"},
    [GP__V_PREP] = {"prep", "host pre-processing (prep workers) is the bottleneck"},
    [GP__V_H2D] = {"h2d", "host-to-device copies are the bottleneck"},
    [GP__V_COMPUTE] = {"compute", "compute-bound: the healthy case"},
    [GP__V_D2H] = {"d2h", "device-to-host copies are the bottleneck"},
    [GP__V_CALLBACKS] = {"callbacks", "callbacks / post-processing are the bottleneck"},
    [GP__V_SMALL_BATCHES] = {"small-batches", "batches too small for the configured delay"},
    [GP__V_ENQUEUE] = {"enqueue", "host enqueue takes longer than the GPU compute"},
    [GP__V_INFLIGHT] = {"inflight", "too few in-flight slots: stages cannot overlap"},
    [GP__V_MIXED] = {"mixed", "no single bottleneck"},
};

const char *gp__verdict_name(gp__verdict v) {
    return (unsigned)v < GP__V_COUNT_ ? verdicts[v].name : "unknown";
}

const char *gp__verdict_title(gp__verdict v) {
    return (unsigned)v < GP__V_COUNT_ ? verdicts[v].title : "unknown";
}

static void say(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* "h2d 12%, compute 95%, d2h 3%" */
static void stage_mix(const gp__diag *d, char *buf, size_t len) {
    say(buf, len, "h2d %.0f%%, compute %.0f%%, d2h %.0f%%", pct(d->h2d), pct(d->compute),
        pct(d->d2h));
}

static void explain(const gp_stats *s, gp__diag *d) {
    char mix[64];
    stage_mix(d, mix, sizeof mix);
    double per_item = s->completed ? 1.0 / (double)s->completed : 0; /* x busy ns */
    switch (d->bottleneck) {
    case GP__V_NO_WORK:
        say(d->why, sizeof d->why, "%" PRIu64 " items submitted, no batch dispatched yet",
            s->submitted);
        say(d->knob, sizeof d->knob, "submit work, then ask again");
        break;
    case GP__V_PRODUCERS: {
        char held[80] = "";
        if (d->delay_wait >= 0.01)
            say(held, sizeof held, " and held a partial batch for max_delay_us %.0f%%",
                pct(d->delay_wait));
        say(d->why, sizeof d->why,
            "compute busy %.0f%% (%s) - producers submit %s items/s but one batch of %.1f "
            "items takes %s of compute (the device could take ~%s items/s at this batch size): "
            "the batcher found no item waiting %.0f%% of the time%s, the GPU is starved",
            pct(d->compute), mix, fmt_count(d->items_per_s).s, d->mean_batch,
            fmt_ns(d->batch_compute_us * 1e3).s, fmt_count(d->device_items_per_s).s,
            pct(d->starved), held);
        say(d->knob, sizeof d->knob,
            "add producer threads, or move pre-processing off the producers (prep_workers with "
            "gp_pipeline_submit_prep); if this is simply the offered load, the GPU has "
            "headroom");
        break;
    }
    case GP__V_PREP:
        say(d->why, sizeof d->why,
            "prep workers busy %.0f%% (%d worker%s, %s of prep per item) while compute is busy "
            "%.0f%% and the batcher found no item waiting %.0f%% of the time",
            pct(d->prep), s->prep_workers, s->prep_workers == 1 ? "" : "s",
            fmt_ns((double)s->prep_busy_ns * per_item).s, pct(d->compute), pct(d->starved));
        say(d->knob, sizeof d->knob,
            "raise prep_workers (now %d) if cores are free, make prep cheaper, or move the "
            "transform to the GPU (u8 input with a normalize kernel, which also cuts H2D bytes "
            "4x)",
            s->prep_workers);
        break;
    case GP__V_H2D:
        say(d->why, sizeof d->why,
            "H2D copies busy %.0f%% of the time moving %.2f GB/s (%s per item, %s) while "
            "compute is busy %.0f%%",
            pct(d->h2d), d->h2d_gbps, fmt_bytes((double)s->item_in_bytes).s, mix, pct(d->compute));
        say(d->knob, sizeof d->knob,
            "send fewer bytes: u8 or fp16 inputs normalized on the device, crop or resize "
            "before submit; check the link (nvidia-smi -q: PCIe generation and width). The "
            "ring is already pinned and each batch moves in one copy");
        break;
    case GP__V_D2H:
        say(d->why, sizeof d->why,
            "D2H copies busy %.0f%% of the time moving %.2f GB/s (%s per item, %s) while "
            "compute is busy %.0f%%",
            pct(d->d2h), d->d2h_gbps, fmt_bytes((double)s->item_out_bytes).s, mix, pct(d->compute));
        say(d->knob, sizeof d->knob,
            "return less: argmax, top-k or softmax on the device (post-processing kernels), "
            "fp16 outputs, only the fields the caller reads");
        break;
    case GP__V_COMPUTE: {
        say(d->why, sizeof d->why,
            "compute busy %.0f%% of wall time (%s), %s per batch of %.1f items (max_batch "
            "%" PRIu64 "), %s items/s, p99 latency %s",
            pct(d->compute), mix, fmt_ns(d->batch_compute_us * 1e3).s, d->mean_batch, s->max_batch,
            fmt_count(d->items_per_s).s, fmt_ns((double)s->latency_p99).s);
        int small = d->mean_batch * 4 < (double)s->max_batch;
        /* One slot: the copies of the next batch wait for this compute; slots would help. */
        int serial = s->inflight == 1 && d->h2d + d->d2h > 0.05 && d->compute < 0.95;
        say(d->knob, sizeof d->knob,
            "%s%sto go faster make the compute cheaper: fp16/bf16 or tf32 tensor cores, fused "
            "layers, CUDA graphs for small models (cuda_graphs=1); raise max_batch if latency "
            "allows.%s",
            serial ? "inflight=1 runs the copies in series with the compute: raise inflight to "
                     "hide them; "
                   : "",
            small ? "batches average far below max_batch: a max_delay_us or preferred sizes "
                    "let each batch carry more items; "
                  : "",
            serial ? "" : " More producers or slots will not help");
        break;
    }
    case GP__V_CALLBACKS:
        say(d->why, sizeof d->why,
            "completion workers busy %.0f%% (%d worker%s, %s in callbacks per item) while "
            "compute is busy %.0f%%; callbacks hold ring slots, so producers wait for space "
            "(back-pressure %.2f producer-s per s)",
            pct(d->callbacks), s->completion_workers, s->completion_workers == 1 ? "" : "s",
            fmt_ns((double)s->callback_busy_ns * per_item).s, pct(d->compute), d->backpressure);
        say(d->knob, sizeof d->knob,
            "keep callbacks short (copy the output and hand it to your own queue), raise "
            "completion_workers (now %d; callbacks then run out of submit order), or shrink "
            "post-processing with device kernels (softmax, argmax, top-k)",
            s->completion_workers);
        break;
    case GP__V_SMALL_BATCHES: {
        double full_ms = d->items_per_s > 0 ? (double)s->max_batch / d->items_per_s * 1e3 : 0;
        say(d->why, sizeof d->why,
            "%.0f%% of batches left on the %u us max_delay_us timer with a mean of %.1f items "
            "(max_batch %" PRIu64 "): at %s items/s a full batch needs %.1f ms, so every item "
            "waits for the timer (queue wait p50 %s) while compute is busy only %.0f%%",
            100.0 * (double)s->close_reasons[GP_CLOSE_DELAY] / (double)s->batches, s->max_delay_us,
            d->mean_batch, s->max_batch, fmt_count(d->items_per_s).s, full_ms,
            fmt_ns((double)s->queue_wait_p50).s, pct(d->compute));
        say(d->knob, sizeof d->knob,
            "if latency matters, lower max_delay_us (0 = dispatch as soon as a slot is free; "
            "a batch still grows while every slot is busy); if device time per item matters, "
            "set preferred sizes this load reaches (about %.0f items) so batches leave without "
            "the timer, or raise the delay toward %.1f ms",
            d->mean_batch, full_ms);
        break;
    }
    case GP__V_ENQUEUE:
        say(d->why, sizeof d->why,
            "the batcher spends %.0f%% of wall time enqueuing: %s of host work per batch "
            "(copies + compute launch) vs %s of device compute per batch; the GPU waits for "
            "the CPU to launch",
            pct(d->enqueue), fmt_ns(d->batch_enqueue_us * 1e3).s,
            fmt_ns(d->batch_compute_us * 1e3).s);
        if (s->cuda_graphs && s->graph_eager)
            say(d->knob, sizeof d->knob,
                "CUDA graphs are on but %" PRIu64 " batches ran eager (%s): fix that; fuse "
                "kernels or raise max_batch so each launch carries more items",
                s->graph_eager, s->graph_eager_reason[0] ? s->graph_eager_reason : "no reason");
        else
            say(d->knob, sizeof d->knob,
                "capture the compute in CUDA graphs (cuda_graphs=1: one launch per batch), "
                "fuse kernels, or raise max_batch so each launch carries more items");
        break;
    case GP__V_INFLIGHT:
        say(d->why, sizeof d->why,
            "a batch waited for a free slot %.0f%% of the time, yet no stage is busy more than "
            "%.0f%% (%s): with inflight=%d the copies and compute of consecutive batches "
            "cannot overlap",
            pct(d->saturated), pct(fmax(d->h2d, fmax(d->compute, d->d2h))), mix, s->inflight);
        say(d->knob, sizeof d->knob, "raise inflight (now %d) to 3 or more", s->inflight);
        break;
    case GP__V_MIXED:
    default:
        say(d->why, sizeof d->why,
            "no stage is saturated (%s, callbacks %.0f%%, prep %.0f%%, enqueue %.0f%%), the "
            "batcher was starved %.0f%%, held batches for the delay %.0f%% and waited for a "
            "slot %.0f%% of the time",
            mix, pct(d->callbacks), pct(d->prep), pct(d->enqueue), pct(d->starved),
            pct(d->delay_wait), pct(d->saturated));
        say(d->knob, sizeof d->knob,
            "sweep batch size, inflight and producers with gp-bench and watch which number "
            "moves");
        break;
    }
}

void gp__diagnose(const gp_stats *s, gp__diag *d) {
    memset(d, 0, sizeof *d);
    double wall = s->wall_ns ? (double)s->wall_ns : 1.0;
    double batches = s->batches ? (double)s->batches : 1.0;
    d->wall_s = wall / 1e9;
    d->items_per_s = (double)s->completed / d->wall_s;
    d->mean_batch = (double)s->batch_items / batches;
    /* A window's edges can cut an interval that began before it: cap busy at wall time. */
    d->h2d = fmin(1.0, (double)s->h2d_busy_ns / wall);
    d->compute = fmin(1.0, (double)s->compute_busy_ns / wall);
    d->d2h = fmin(1.0, (double)s->d2h_busy_ns / wall);
    d->callbacks = (double)s->callback_busy_ns /
                   (wall * (s->completion_workers > 0 ? s->completion_workers : 1));
    d->callbacks = fmin(1.0, d->callbacks);
    d->prep =
        s->prep_workers > 0 ? fmin(1.0, (double)s->prep_busy_ns / (wall * s->prep_workers)) : 0;
    d->enqueue = fmin(1.0, (double)s->enqueue_ns / wall);
    d->starved = fmin(1.0, (double)s->starved_ns / wall);
    d->saturated = fmin(1.0, (double)s->saturated_ns / wall);
    d->delay_wait = fmin(1.0, (double)s->delay_wait_ns / wall);
    d->backpressure = (double)s->backpressure_ns / wall;
    d->batch_compute_us = (double)s->compute_busy_ns / batches / 1e3;
    d->batch_enqueue_us = (double)s->enqueue_ns / batches / 1e3;
    d->device_items_per_s =
        d->batch_compute_us > 0 ? d->mean_batch / (d->batch_compute_us * 1e-6) : 0;
    d->h2d_gbps = (double)s->h2d_bytes / wall;
    d->d2h_gbps = (double)s->d2h_bytes / wall;

    gp__verdict v = GP__V_MIXED;
    if (s->batches == 0) {
        v = GP__V_NO_WORK;
    } else {
        /* The busiest resource, if it is saturated, limits everything upstream of it. */
        struct {
            gp__verdict v;
            double busy;
        } res[] = {
            {GP__V_COMPUTE, d->compute},
            {GP__V_H2D, d->h2d},
            {GP__V_D2H, d->d2h},
            {GP__V_CALLBACKS, d->callbacks},
            {GP__V_PREP, d->prep},
            /* The batcher's launch work counts only when it exceeds the device's work. */
            {GP__V_ENQUEUE, d->batch_enqueue_us > d->batch_compute_us ? d->enqueue : 0},
        };
        double best = 0;
        for (size_t i = 0; i < sizeof res / sizeof res[0]; i++)
            if (res[i].busy > best) {
                best = res[i].busy;
                v = res[i].v;
            }
        if (best < SATURATED) {
            if (s->max_delay_us > 0 && 2 * s->close_reasons[GP_CLOSE_DELAY] >= s->batches &&
                2 * d->mean_batch <= (double)s->max_batch)
                v = GP__V_SMALL_BATCHES;
            else if (d->saturated >= SLOTS_FULL)
                v = GP__V_INFLIGHT;
            else if (d->starved + d->delay_wait >= STARVED) /* waiting for input */
                v = GP__V_PRODUCERS;
            else
                v = GP__V_MIXED;
        }
    }
    d->bottleneck = v;
    d->verdict = s->fell_back ? GP__V_GPU_NOT_USED : v;
    explain(s, d);
}

/* ---- JSON ------------------------------------------------------------------------------- */

void gp__json_str(FILE *f, const char *s) {
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

/* JSON has no NaN/Inf; derived numbers are finite by construction, this keeps it so. */
static double fin(double v) {
    return isfinite(v) ? v : 0.0;
}

int gp__stats_write_json(const gp_stats *s, FILE *f) {
    gp__diag d;
    gp__diagnose(s, &d);
    fprintf(f, "{\"backend\":\"%s\",\"fell_back\":%s,\"fallback_reason\":",
            gp_backend_name(s->backend), s->fell_back ? "true" : "false");
    gp__json_str(f, s->fell_back ? s->fallback_reason : "");
#define U(name) fprintf(f, ",\"" #name "\":%" PRIu64, (uint64_t)s->name)
    U(wall_ns);
    U(submitted);
    U(completed);
    U(completed_ok);
    U(timed_out);
    U(canceled);
    U(failed);
    U(rejected_full);
    U(batches);
    U(batch_items);
    fputs(",\"batch_hist\":[", f);
    for (int i = 0; i < GP_HIST_BUCKETS; i++)
        fprintf(f, "%s%" PRIu64, i ? "," : "", s->batch_hist[i]);
    fputs("],\"close_reasons\":{", f);
    for (int i = 0; i < GP_CLOSE_COUNT_; i++)
        fprintf(f, "%s\"%s\":%" PRIu64, i ? "," : "", gp_close_reason_name((gp_close_reason)i),
                s->close_reasons[i]);
    fputc('}', f);
    U(h2d_busy_ns);
    U(compute_busy_ns);
    U(d2h_busy_ns);
    U(callback_busy_ns);
    U(prep_busy_ns);
    U(h2d_bytes);
    U(d2h_bytes);
    U(starved_ns);
    U(backpressure_ns);
    U(saturated_ns);
    U(enqueue_ns);
    U(delay_wait_ns);
    U(queue_wait_p50);
    U(queue_wait_p95);
    U(queue_wait_p99);
    U(queue_wait_sum_ns);
    U(latency_p50);
    U(latency_p95);
    U(latency_p99);
    U(latency_max);
    U(latency_sum_ns);
    U(graph_replays);
    U(graph_eager);
    fputs(",\"graph_eager_reason\":", f);
    gp__json_str(f, s->graph_eager_reason);
    fputs(",\"config\":{", f);
    fprintf(f,
            "\"max_batch\":%" PRIu64 ",\"capacity\":%" PRIu64 ",\"item_in_bytes\":%" PRIu64
            ",\"item_out_bytes\":%" PRIu64 ",\"max_delay_us\":%u,\"inflight\":%d,"
            "\"prep_workers\":%d,\"completion_workers\":%d,\"cuda_graphs\":%d}",
            s->max_batch, s->capacity, s->item_in_bytes, s->item_out_bytes, s->max_delay_us,
            s->inflight, s->prep_workers, s->completion_workers, s->cuda_graphs);
#undef U
    fprintf(f,
            ",\"derived\":{\"items_per_s\":%.6g,\"mean_batch\":%.6g,\"h2d_busy\":%.6g,"
            "\"compute_busy\":%.6g,\"d2h_busy\":%.6g,\"callback_util\":%.6g,\"prep_util\":%.6g,"
            "\"enqueue_busy\":%.6g,\"starved\":%.6g,\"delay_wait\":%.6g,\"saturated\":%.6g,"
            "\"backpressure\":%.6g,"
            "\"enqueue_us_per_batch\":%.6g,\"compute_us_per_batch\":%.6g,"
            "\"h2d_gbps\":%.6g,\"d2h_gbps\":%.6g}",
            fin(d.items_per_s), fin(d.mean_batch), fin(d.h2d), fin(d.compute), fin(d.d2h),
            fin(d.callbacks), fin(d.prep), fin(d.enqueue), fin(d.starved), fin(d.delay_wait),
            fin(d.saturated), fin(d.backpressure), fin(d.batch_enqueue_us), fin(d.batch_compute_us),
            fin(d.h2d_gbps), fin(d.d2h_gbps));
    fprintf(f, ",\"verdict\":\"%s\",\"bottleneck\":\"%s\",\"why\":", gp__verdict_name(d.verdict),
            gp__verdict_name(d.bottleneck));
    gp__json_str(f, d.why);
    fputs(",\"knob\":", f);
    gp__json_str(f, d.knob);
    return fputs("}\n", f) < 0 || ferror(f) ? GP_EIO : GP_OK;
}

int gp_pipeline_stats_json(gp_pipeline *p, FILE *f) {
    gp_stats s;
    if (!p || !f) return GP_EINVAL;
    gp__stats_snapshot(p, &s);
    return gp__stats_write_json(&s, f);
}

/* ---- Prometheus text exposition (format 0.0.4) ------------------------------------------ */

static void prom_head(FILE *f, const char *name, const char *type, const char *help) {
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_u(FILE *f, const char *name, const char *type, const char *help, uint64_t v) {
    prom_head(f, name, type, help);
    fprintf(f, "%s %" PRIu64 "\n", name, v);
}

static void prom_d(FILE *f, const char *name, const char *type, const char *help, double v) {
    prom_head(f, name, type, help);
    fprintf(f, "%s %.9g\n", name, fin(v));
}

/* Latency bucket bounds, seconds. A value falls in the first bound at or above its histogram
   bucket's top, so the counts are exact to the histogram's 1/16 relative width. */
static const double prom_le[] = {1e-5,   2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
                                 2.5e-2, 5e-2,   0.1,  0.25, 0.5,    1.0,  2.5,  5.0,    10.0};

static void prom_latency(FILE *f, const char *name, const char *help, const uint64_t *counts,
                         uint64_t sum_ns) {
    prom_head(f, name, "histogram", help);
    uint64_t cum = 0, total = 0;
    unsigned i = 0;
    for (unsigned k = 0; k < GP__HIST_BUCKETS; k++)
        total += counts[k];
    for (size_t b = 0; b < sizeof prom_le / sizeof prom_le[0]; b++) {
        double le_ns = prom_le[b] * 1e9;
        /* Bucket i's values are below gp__hist_bucket_low(i + 1). */
        while (i < GP__HIST_BUCKETS && (double)gp__hist_bucket_low(i + 1) - 1 <= le_ns)
            cum += counts[i++];
        fprintf(f, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, prom_le[b], cum);
    }
    fprintf(f, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, total);
    fprintf(f, "%s_sum %.9g\n%s_count %" PRIu64 "\n", name, (double)sum_ns / 1e9, name, total);
}

int gp_pipeline_stats_prometheus(gp_pipeline *p, FILE *f) {
    if (!p || !f) return GP_EINVAL;
    gp__stats_mark m; /* snapshot and the histograms, read together */
    gp__stats_mark_take(p, &m);
    const gp_stats *s = &m.s;
    gp__diag d;
    gp__diagnose(s, &d);

    prom_head(f, "gpupipe_info", "gauge",
              "Backend that runs (host or cuda), whether AUTO fell back, library version.");
    fprintf(f, "gpupipe_info{backend=\"%s\",fell_back=\"%d\",version=\"%s\"} 1\n",
            gp_backend_name(s->backend), s->fell_back, gp_version());
    prom_d(f, "gpupipe_uptime_seconds", "gauge", "Seconds since the pipeline was created.",
           (double)s->wall_ns / 1e9);
    prom_u(f, "gpupipe_items_submitted_total", "counter", "Items accepted by submit.",
           s->submitted);
    prom_head(f, "gpupipe_items_completed_total", "counter",
              "Callbacks run, by the status the item completed with.");
    fprintf(f,
            "gpupipe_items_completed_total{status=\"ok\"} %" PRIu64 "\n"
            "gpupipe_items_completed_total{status=\"timed_out\"} %" PRIu64 "\n"
            "gpupipe_items_completed_total{status=\"canceled\"} %" PRIu64 "\n"
            "gpupipe_items_completed_total{status=\"failed\"} %" PRIu64 "\n",
            s->completed_ok, s->timed_out, s->canceled, s->failed);
    prom_u(f, "gpupipe_items_rejected_total", "counter",
           "Submits that returned GP_EAGAIN because the ring was full.", s->rejected_full);

    prom_head(f, "gpupipe_batch_size_items", "histogram", "Items per dispatched batch.");
    uint64_t cum = 0;
    for (int b = 1; b < GP_HIST_BUCKETS; b++) { /* bucket b: sizes up to 2^b - 1 */
        cum += s->batch_hist[b];
        if (b < GP_HIST_BUCKETS - 1 && b <= 21)
            fprintf(f, "gpupipe_batch_size_items_bucket{le=\"%" PRIu64 "\"} %" PRIu64 "\n",
                    (UINT64_C(1) << b) - 1, cum);
    }
    fprintf(f,
            "gpupipe_batch_size_items_bucket{le=\"+Inf\"} %" PRIu64 "\n"
            "gpupipe_batch_size_items_sum %" PRIu64 "\ngpupipe_batch_size_items_count %" PRIu64
            "\n",
            s->batches, s->batch_items, s->batches);
    prom_head(f, "gpupipe_batches_closed_total", "counter",
              "Batches by the reason they left the batcher.");
    for (int i = 0; i < GP_CLOSE_COUNT_; i++)
        fprintf(f, "gpupipe_batches_closed_total{reason=\"%s\"} %" PRIu64 "\n",
                gp_close_reason_name((gp_close_reason)i), s->close_reasons[i]);

    prom_head(f, "gpupipe_stage_busy_seconds_total", "counter",
              "Busy time per stage: union of intervals over slots for h2d/compute/d2h, sum over "
              "workers for callback/prep.");
    const struct {
        const char *stage;
        uint64_t ns;
    } busy[] = {{"h2d", s->h2d_busy_ns},
                {"compute", s->compute_busy_ns},
                {"d2h", s->d2h_busy_ns},
                {"callback", s->callback_busy_ns},
                {"prep", s->prep_busy_ns}};
    for (size_t i = 0; i < sizeof busy / sizeof busy[0]; i++)
        fprintf(f, "gpupipe_stage_busy_seconds_total{stage=\"%s\"} %.9g\n", busy[i].stage,
                (double)busy[i].ns / 1e9);
    prom_d(f, "gpupipe_compute_busy_ratio", "gauge",
           "Compute busy time over wall time since create (0..1).", d.compute);
    prom_head(f, "gpupipe_copy_bytes_total", "counter", "Bytes copied, by direction.");
    fprintf(f,
            "gpupipe_copy_bytes_total{direction=\"h2d\"} %" PRIu64 "\n"
            "gpupipe_copy_bytes_total{direction=\"d2h\"} %" PRIu64 "\n",
            s->h2d_bytes, s->d2h_bytes);
    prom_d(f, "gpupipe_batcher_starved_seconds_total", "counter",
           "Time the batcher found no item to send.", (double)s->starved_ns / 1e9);
    prom_d(f, "gpupipe_batcher_delay_seconds_total", "counter",
           "Time the batcher held a partial batch for max_delay_us with a slot free.",
           (double)s->delay_wait_ns / 1e9);
    prom_d(f, "gpupipe_batcher_saturated_seconds_total", "counter",
           "Time the batcher had a batch but every in-flight slot was busy.",
           (double)s->saturated_ns / 1e9);
    prom_d(f, "gpupipe_producer_backpressure_seconds_total", "counter",
           "Time producers were blocked on a full ring, summed over producers.",
           (double)s->backpressure_ns / 1e9);
    prom_d(f, "gpupipe_enqueue_seconds_total", "counter",
           "Host time spent enqueuing batches (copies and compute launch).",
           (double)s->enqueue_ns / 1e9);
    prom_u(f, "gpupipe_graph_replays_total", "counter", "Batches run as a CUDA graph replay.",
           s->graph_replays);
    prom_u(f, "gpupipe_graph_eager_batches_total", "counter", "Batches run without a CUDA graph.",
           s->graph_eager);

    prom_latency(f, "gpupipe_queue_wait_seconds",
                 "Time from submit to the batch's dispatch, per item.", m.queue_wait,
                 s->queue_wait_sum_ns);
    prom_latency(f, "gpupipe_latency_seconds", "Time from submit to the callback, per item.",
                 m.latency, s->latency_sum_ns);

    prom_head(f, "gpupipe_verdict", "gauge",
              "The doctor's verdict (1 for the current one); see gp_pipeline_report.");
    fprintf(f, "gpupipe_verdict{verdict=\"%s\",bottleneck=\"%s\"} 1\n", gp__verdict_name(d.verdict),
            gp__verdict_name(d.bottleneck));
    return ferror(f) ? GP_EIO : GP_OK;
}

/* ---- the report ------------------------------------------------------------------------- */

int gp__stats_write_report(const gp_stats *s, FILE *f) {
    gp__diag d;
    gp__diagnose(s, &d);

    fprintf(f, "gpupipe %s report: backend %s", gp_version(), gp_backend_name(s->backend));
    if (s->fell_back)
        fprintf(f, " (AUTO fell back: no usable GPU)");
    else if (s->backend == GP_BACKEND_HOST)
        fprintf(f, " (requested: no GPU is used)");
    fprintf(f, ", %s items in %s\n", fmt_count((double)s->completed).s,
            fmt_ns((double)s->wall_ns).s);
    if (s->fell_back) {
        fprintf(f, "verdict: %s - %s\n", gp__verdict_name(GP__V_GPU_NOT_USED),
                gp__verdict_title(GP__V_GPU_NOT_USED));
        fprintf(f,
                "  why:  backend AUTO found no usable GPU: %s. Every number below comes from "
                "the host backend.\n",
                s->fallback_reason[0] ? s->fallback_reason : "no reason recorded");
        fprintf(f, "  knob: build with CUDA (cmake -DGP_WITH_CUDA=ON) and make the device "
                   "visible (nvidia-smi, CUDA_VISIBLE_DEVICES, driver version); set "
                   "backend=GP_BACKEND_CUDA to fail at create instead of falling back\n");
        fprintf(f, "pipeline bottleneck on the host backend: %s - %s\n",
                gp__verdict_name(d.bottleneck), gp__verdict_title(d.bottleneck));
    } else {
        fprintf(f, "verdict: %s - %s\n", gp__verdict_name(d.bottleneck),
                gp__verdict_title(d.bottleneck));
    }
    fprintf(f, "  why:  %s\n  knob: %s\n", d.why, d.knob);

    fprintf(f, "numbers:\n");
    fprintf(f,
            "  items     %" PRIu64 " submitted, %" PRIu64 " done (ok %" PRIu64
            ", timed out %" PRIu64 ", canceled %" PRIu64 ", failed %" PRIu64 "), %" PRIu64
            " rejected (ring full); %s items/s\n",
            s->submitted, s->completed, s->completed_ok, s->timed_out, s->canceled, s->failed,
            s->rejected_full, fmt_count(d.items_per_s).s);
    fprintf(f,
            "  batches   %" PRIu64 ", mean %.1f items (max_batch %" PRIu64 ", max_delay_us %u, "
            "inflight %d); closed by",
            s->batches, d.mean_batch, s->max_batch, s->max_delay_us, s->inflight);
    for (int i = 0; i < GP_CLOSE_COUNT_; i++)
        fprintf(f, " %s %" PRIu64 "%s", gp_close_reason_name((gp_close_reason)i),
                s->close_reasons[i], i + 1 < GP_CLOSE_COUNT_ ? "," : "\n");
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
            fmt_ns((double)s->latency_p50).s, fmt_ns((double)s->latency_p95).s,
            fmt_ns((double)s->latency_p99).s, fmt_ns((double)s->latency_max).s);
    fprintf(f, "  queued    p50 %s, p95 %s, p99 %s (submit -> dispatch)\n",
            fmt_ns((double)s->queue_wait_p50).s, fmt_ns((double)s->queue_wait_p95).s,
            fmt_ns((double)s->queue_wait_p99).s);
    fprintf(f,
            "  device    busy h2d %.1f%%, compute %.1f%%, d2h %.1f%%; %s of compute per batch; "
            "h2d %.3f GB/s, d2h %.3f GB/s\n",
            pct(d.h2d), pct(d.compute), pct(d.d2h), fmt_ns(d.batch_compute_us * 1e3).s, d.h2d_gbps,
            d.d2h_gbps);
    fprintf(f,
            "  batcher   starved %.1f%%, holding for max_delay_us %.1f%%, waiting for a slot "
            "%.1f%%, enqueue %s per batch (%.1f%% of wall)\n",
            pct(d.starved), pct(d.delay_wait), pct(d.saturated), fmt_ns(d.batch_enqueue_us * 1e3).s,
            pct(d.enqueue));
    fprintf(f, "  workers   callbacks %.1f%% of %d, prep ", pct(d.callbacks),
            s->completion_workers);
    if (s->prep_workers)
        fprintf(f, "%.1f%% of %d", pct(d.prep), s->prep_workers);
    else
        fprintf(f, "off");
    fprintf(f, "; producers blocked on a full ring %.2f s per s\n", d.backpressure);
    if (s->backend == GP_BACKEND_CUDA)
        fprintf(f, "  graphs    %" PRIu64 " replays, %" PRIu64 " eager%s%s\n", s->graph_replays,
                s->graph_eager, s->graph_eager_reason[0] ? ": " : "", s->graph_eager_reason);
    return ferror(f) ? GP_EIO : GP_OK;
}

int gp_pipeline_report(gp_pipeline *p, FILE *f) {
    gp_stats s;
    if (!p || !f) return GP_EINVAL;
    gp__stats_snapshot(p, &s);
    return gp__stats_write_report(&s, f);
}

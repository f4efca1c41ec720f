/* gp-bench output: the header, the table with baselines and ratios, CSV, JSON and SVG. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gp-bench.h"

typedef struct sbuf {
    char s[32];
} sbuf;

/* 3 significant digits, no exponent. */
static sbuf sig3(double v) {
    sbuf b;
    double a = fabs(v);
    int dec = a == 0 ? 0 : a < 1 ? 3 : a < 10 ? 2 : a < 100 ? 1 : 0;
    if (a != 0 && a < 0.001) dec = 6;
    snprintf(b.s, sizeof b.s, "%.*f", dec, v);
    return b;
}

static sbuf rate(double v) {
    sbuf b;
    if (v >= 1e6)
        snprintf(b.s, sizeof b.s, "%.28sM", sig3(v / 1e6).s);
    else if (v >= 1e3)
        snprintf(b.s, sizeof b.s, "%.28sk", sig3(v / 1e3).s);
    else
        snprintf(b.s, sizeof b.s, "%s", sig3(v).s);
    return b;
}

static const char *arrival_name(const gb_opts *o, char *buf, size_t len) {
    if (o->arrival == GB_RATE)
        snprintf(buf, len, "rate=%g items/s (evenly spaced)", o->rate);
    else if (o->arrival == GB_POISSON)
        snprintf(buf, len, "poisson=%g items/s", o->rate);
    else if (o->window)
        snprintf(buf, len, "closed loop, %d items in flight per producer", o->window);
    else
        snprintf(buf, len, "closed loop, (inflight+2)*batch items in flight over the producers");
    return buf;
}

static double naive_tokens_per_s(const gb_run *r) {
    return r->naive.items ? r->naive.items_per_s * (double)r->naive.tokens / (double)r->naive.items
                          : 0;
}

int gb_best_point(const gb_run *r) {
    int best = -1;
    for (int i = 0; i < r->npts; i++)
        if (best < 0 || r->pts[i].items_per_s > r->pts[best].items_per_s) best = i;
    return best;
}

void gb_print_header(const gb_run *r, FILE *f) {
    const gb_opts *o = r->o;
    char arr[128];
    fprintf(f, "gp-bench %s, %s, %s\n", gp_version(), r->date, r->machine);
    fprintf(f, "workload  %s\n", r->workload_desc);
    if (r->token_bytes) {
        fprintf(f, "packing  ");
        for (int i = 0; i < o->npacking; i++)
            fprintf(f, " %s%s", gb_packing_name(o->packing[i]), i + 1 < o->npacking ? "," : "");
        fprintf(f, " (same arrivals and item lengths in each; tok/s counts useful tokens, pad%% "
                   "the computed tokens that were padding: gp_batch_report_padding)\n");
    }
    fprintf(f, "backend   %s", gp_backend_name(r->backend));
    if (r->fell_back)
        fprintf(f, " - AUTO fell back, the GPU is not used: %s", r->fallback_reason);
    else if (r->backend == GP_BACKEND_HOST)
        fprintf(f, " (requested)");
    if (r->backend == GP_BACKEND_HOST && o->precision && strcmp(o->precision, "fp32") != 0)
        fprintf(f, "; --precision %s applies on CUDA: the host computes in fp32 (model.h)",
                o->precision);
    if (o->cuda_graphs || o->spin_wait)
        fprintf(f, "\npipeline %s%s", o->cuda_graphs ? " cuda_graphs=1" : "",
                o->spin_wait ? " spin_wait=1" : "");
    fprintf(f, "\nload      %s; %.3g s per point after %.3g s warm-up",
            arrival_name(o, arr, sizeof arr), o->duration_s, o->warmup_s);
    if (o->repeat > 1)
        fprintf(f, "; median of %d windows per point%s", o->repeat,
                o->naive ? " and of as many naive runs" : "");
    fputc('\n', f);
}

static int swept_inflight(const gb_opts *o) {
    return o->ninflight > 1;
}
static int swept_producers(const gb_opts *o) {
    return o->nproducers > 1;
}
static int swept_delay(const gb_opts *o) {
    return o->ndelay > 1;
}
/* Runs with token counts show the packing and the token columns. */
static int varlen(const gb_run *r) {
    return r->token_bytes > 0;
}

/* Pipeline over bound; 0 when there is no bound. */
static double over_bound(const gb_point *p) {
    return p->bound_items_per_s > 0 ? p->items_per_s / p->bound_items_per_s : 0;
}

static int above_bound(const gb_point *p) {
    return over_bound(p) > GB_OVER_BOUND;
}

/* Points of one series share inflight, producers and delay (and packing, within a series). */
static int same_setting(const gb_point *a, const gb_point *b) {
    return a->batch == b->batch && a->inflight == b->inflight && a->producers == b->producers &&
           a->delay_us == b->delay_us;
}

/* Variable-size items: each setting's modes side by side, packed first. */
static void print_packing(const gb_run *r, FILE *f) {
    const gb_opts *o = r->o;
    fprintf(f,
            "\nvariable-size items (%s tokens of %zu B: mean %.1f, p50 %u, p99 %u; the same items "
            "in every mode):\n",
            r->lengths_spec, r->token_bytes, r->mean_tokens, r->p50_tokens, r->p99_tokens);
    int done[GB_MAX_POINTS] = {0};
    for (int i = 0; i < r->npts; i++) {
        if (done[i]) continue;
        const gb_point *base = NULL;
        for (int j = i; j < r->npts; j++)
            if (same_setting(&r->pts[i], &r->pts[j]) && r->pts[j].packing == GB_PACKED)
                base = &r->pts[j];
        fprintf(f, "  batch %zu", r->pts[i].batch);
        if (swept_inflight(o)) fprintf(f, ", inflight %d", r->pts[i].inflight);
        if (swept_producers(o)) fprintf(f, ", producers %d", r->pts[i].producers);
        if (swept_delay(o)) fprintf(f, ", delay %u us", r->pts[i].delay_us);
        fputs(":", f);
        for (int j = i; j < r->npts; j++) {
            const gb_point *p = &r->pts[j];
            if (!same_setting(&r->pts[i], p)) continue;
            done[j] = 1;
            fprintf(f, "%s %s %s tok/s (%s MB/s useful), %s items/s, %s B H2D/item, %.0f%% padding",
                    p == &r->pts[i] ? "" : ";", gb_packing_name(p->packing),
                    rate(p->tokens_per_s).s, sig3(p->useful_bytes_per_s / 1e6).s,
                    rate(p->items_per_s).s, rate(p->h2d_bytes_per_item).s, 100 * p->padding);
            if (base && p != base && p->tokens_per_s > 0)
                fprintf(f, " (packed does %sx the useful tokens/s)",
                        sig3(base->tokens_per_s / p->tokens_per_s).s);
        }
        fputc('\n', f);
    }
}

void gb_print_table(const gb_run *r, FILE *f) {
    const gb_opts *o = r->o;
    fprintf(f, "\n%6s", "batch");
    if (varlen(r)) fprintf(f, " %-7s", "packing");
    if (swept_inflight(o)) fprintf(f, " %8s", "inflight");
    if (swept_producers(o)) fprintf(f, " %9s", "producers");
    if (swept_delay(o)) fprintf(f, " %8s", "delay us");
    fprintf(f, " %9s %8s %8s %8s %8s %8s %8s %8s %9s %6s %-13s %-13s", "items/s", "p50 ms",
            "p95 ms", "p99 ms", "compute%", "H2D GB/s", "D2H GB/s", "enq us", "launch us", "mean",
            "verdict", "bottleneck");
    if (varlen(r)) fprintf(f, " %9s %9s %5s", "tok/s", "H2D B/it", "pad%");
    if (o->bound) fprintf(f, " %9s %7s", "bound/s", "%bound");
    fputc('\n', f);
    int notes = 0, above = 0;
    for (int i = 0; i < r->npts; i++) {
        const gb_point *p = &r->pts[i];
        fprintf(f, "%6zu", p->batch);
        if (varlen(r)) fprintf(f, " %-7s", gb_packing_name(p->packing));
        if (swept_inflight(o)) fprintf(f, " %8d", p->inflight);
        if (swept_producers(o)) fprintf(f, " %9d", p->producers);
        if (swept_delay(o)) fprintf(f, " %8u", p->delay_us);
        fprintf(f, " %9s %8s %8s %8s %7.1f%% %8s %8s %8s %9s %6s %-13s %-13s",
                rate(p->items_per_s).s, sig3(p->p50_us / 1e3).s, sig3(p->p95_us / 1e3).s,
                sig3(p->p99_us / 1e3).s, 100 * p->compute_busy, sig3(p->h2d_gbps).s,
                sig3(p->d2h_gbps).s, sig3(p->enqueue_us).s, sig3(p->launch_us).s,
                sig3(p->mean_batch).s, gp_verdict_name(p->verdict), gp_verdict_name(p->bottleneck));
        if (varlen(r))
            fprintf(f, " %9s %9s %4.0f%%", rate(p->tokens_per_s).s, rate(p->h2d_bytes_per_item).s,
                    100 * p->padding);
        if (o->bound && p->bound_items_per_s > 0) {
            fprintf(f, " %9s %5.0f%%%s", rate(p->bound_items_per_s).s, 100 * over_bound(p),
                    above_bound(p) ? "!" : " ");
            above += above_bound(p);
        } else if (o->bound) {
            char mark[24]; /* "n/a[" + an int + "]" */
            snprintf(mark, sizeof mark, "n/a[%d]", ++notes);
            fprintf(f, " %9s %7s", mark, "-");
        }
        fputc('\n', f);
    }
    if (r->fell_back)
        fprintf(f, "verdict: the report's first verdict (gpu-not-used: AUTO fell back to the host "
                   "backend); bottleneck: the pipeline's own limit on the backend that ran.\n");
    if (above)
        fprintf(f,
                "!  above its bound by more than %.0f%%: a measurement problem, not a result (a "
                "noisy machine, or a bound or window too short); rerun with --repeat 3 or longer "
                "--duration / --bound-duration.%s\n",
                (GB_OVER_BOUND - 1) * 100,
                /* Seen on the first GPU run (H200, 2026-11-26, the demo MLP): 4 of 10 points. */
                r->backend == GP_BACKEND_CUDA
                    ? " On a GPU also: the bound's compute is one batch at a time, but the "
                      "kernels of different slots can run at once when one batch's do not fill "
                      "the GPU (a small model, a small batch), and then it need not be a bound; "
                      "it is one for a compute that fills the GPU (the synthetic workload's "
                      "exclusive kernel)."
                    : "");
    for (int i = 0, k = 0; i < r->npts; i++) {
        const gb_point *p = &r->pts[i];
        if (o->bound && p->bound_items_per_s <= 0)
            fprintf(f, "n/a[%d] batch %zu%s%s, inflight %d: no bound: %s\n", ++k, p->batch,
                    varlen(r) ? ", " : "", varlen(r) ? gb_packing_name(p->packing) : "",
                    p->inflight, p->bound_note[0] ? p->bound_note : "not measured");
    }

    int best = gb_best_point(r);
    fprintf(f, "\nbaselines (same compute, same run):\n");
    if (r->naive.ran && varlen(r))
        fprintf(f, "  naive  %s items/s, %s useful tok/s, p50 %s ms, p95 %s ms, p99 %s ms: %s\n",
                rate(r->naive.items_per_s).s, rate(naive_tokens_per_s(r)).s,
                sig3(r->naive.p50_us / 1e3).s, sig3(r->naive.p95_us / 1e3).s,
                sig3(r->naive.p99_us / 1e3).s, r->naive.how);
    else if (r->naive.ran)
        fprintf(f, "  naive  %s items/s, p50 %s ms, p95 %s ms, p99 %s ms: %s\n",
                rate(r->naive.items_per_s).s, sig3(r->naive.p50_us / 1e3).s,
                sig3(r->naive.p95_us / 1e3).s, sig3(r->naive.p99_us / 1e3).s, r->naive.how);
    else
        fprintf(f, "  naive  not run\n");
    if (o->bound && best >= 0 && r->pts[best].bound_items_per_s > 0) {
        const gb_point *p = &r->pts[best];
        char compute[320];
        if (p->bound_in_slot)
            snprintf(compute, sizeof compute,
                     "the compute's thread CPU time per batch in that one-slot run, %s us (with "
                     "the model's own per-slot buffers, which gp_model_run_host would allocate "
                     "on every call), as many batches at once as there are cores for the "
                     "pipeline's %d slot threads",
                     sig3(p->bound_compute_us).s, p->bound_threads);
        else if (p->bound_alone)
            snprintf(compute, sizeof compute,
                     "compute called directly on %d threads at once (the pipeline's inflight: its "
                     "compute runs on that many slot threads), nothing else running, %s us of CPU "
                     "time per batch, as many batches at once as there are cores for the threads",
                     p->bound_threads, sig3(p->bound_compute_us).s);
        else
            snprintf(compute, sizeof compute, "compute %s us per batch, one batch at a time",
                     sig3(p->bound_compute_us).s);
        fprintf(f,
                "  bound  the slowest stage alone at each batch size (bound/s column), each run "
                "for at least %.3g s and %d batches after a warm-up batch: H2D and D2H timed per "
                "batch (%s) in a one-slot pipeline; %s. At batch %zu: h2d %s us, d2h %s us "
                "per batch -> %s items/s\n",
                o->bound_s, GB_MIN_BATCHES,
                varlen(r) ? "mean: variable-size batches differ in cost" : "median", compute,
                p->batch, sig3(p->bound_h2d_us).s, sig3(p->bound_d2h_us).s,
                rate(p->bound_items_per_s).s);
    } else if (o->bound && best < 0) {
        fprintf(f, "  bound  not measured: no point ran\n");
    } else if (o->bound) {
        fprintf(f, "  bound  not measured at the best point (batch %zu)%s%s\n", r->pts[best].batch,
                r->pts[best].bound_note[0] ? ": " : "", r->pts[best].bound_note);
    } else {
        fprintf(f, "  bound  not run\n");
    }
    fprintf(f, "ratios: ");
    if (best >= 0 && r->naive.ran && r->naive.items_per_s > 0)
        fprintf(f, "pipeline/naive = %sx (best point, batch %zu: %s vs %s items/s)",
                sig3(r->pts[best].items_per_s / r->naive.items_per_s).s, r->pts[best].batch,
                rate(r->pts[best].items_per_s).s, rate(r->naive.items_per_s).s);
    else
        fprintf(f, "pipeline/naive = n/a");
    if (best >= 0 && r->pts[best].bound_items_per_s > 0)
        fprintf(f, "; pipeline/bound = %s (batch %zu: %s of %s items/s)%s\n",
                sig3(over_bound(&r->pts[best])).s, r->pts[best].batch,
                rate(r->pts[best].items_per_s).s, rate(r->pts[best].bound_items_per_s).s,
                above_bound(&r->pts[best])
                    ? " - ABOVE THE BOUND: a measurement problem, not a result (see ! above)"
                    : "");
    else
        fprintf(f, "; pipeline/bound = n/a\n");
    if (o->arrival != GB_CLOSED)
        fprintf(f,
                "(open-loop arrivals: the pipeline runs at the offered %s items/s, so the "
                "ratios show the load, not the capacity; use --arrival closed for that)\n",
                rate(o->rate).s);
    if (varlen(r)) print_packing(r, f);
}

/* ---- CSV -------------------------------------------------------------------------------- */

int gb_write_csv(const gb_run *r, const char *path, int *removed) {
    FILE *f = fopen(path, "w");
    if (!f) return gb_close_output(NULL, path, removed);
    fprintf(f, "kind,batch,inflight,producers,max_delay_us,items_per_s,offered_per_s,p50_us,"
               "p95_us,p99_us,compute_busy_pct,h2d_busy_pct,d2h_busy_pct,h2d_gbps,d2h_gbps,"
               "enqueue_us,mean_batch,verdict,bound_items_per_s,pipeline_over_bound,repeats,"
               "items_per_s_min,items_per_s_max,bottleneck,window_batches,packing,tokens_per_s,"
               "useful_bytes_per_s,h2d_bytes_per_item,padding,mean_tokens,computed_tokens,"
               "launch_us\n");
    for (int i = 0; i < r->npts; i++) {
        const gb_point *p = &r->pts[i];
        fprintf(f,
                "pipeline,%zu,%d,%d,%u,%.6g,%.6g,%.6g,%.6g,%.6g,%.4g,%.4g,%.4g,%.6g,%.6g,%.6g,"
                "%.6g,%s,%.6g,%.6g,%d,%.6g,%.6g,%s,%llu,%s,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\n",
                p->batch, p->inflight, p->producers, p->delay_us, p->items_per_s, p->offered_per_s,
                p->p50_us, p->p95_us, p->p99_us, 100 * p->compute_busy, 100 * p->h2d_busy,
                100 * p->d2h_busy, p->h2d_gbps, p->d2h_gbps, p->enqueue_us, p->mean_batch,
                gp_verdict_name(p->verdict), p->bound_items_per_s, over_bound(p), p->repeats,
                p->items_per_s_min, p->items_per_s_max, gp_verdict_name(p->bottleneck),
                (unsigned long long)p->window_batches, gb_packing_name(p->packing), p->tokens_per_s,
                p->useful_bytes_per_s, p->h2d_bytes_per_item, p->padding, p->mean_tokens,
                p->computed_tokens, p->launch_us);
    }
    if (r->naive.ran) {
        /* One item per call at its own length: no padding. */
        double mean = r->naive.items ? (double)r->naive.tokens / (double)r->naive.items : 0;
        fprintf(f,
                "naive,1,1,1,0,%.6g,0,%.6g,%.6g,%.6g,0,0,0,0,0,0,1,serial,0,0,%d,%.6g,%.6g,serial,"
                "0,serial,%.6g,%.6g,%.6g,0,%.6g,%.6g,0\n",
                r->naive.items_per_s, r->naive.p50_us, r->naive.p95_us, r->naive.p99_us,
                r->naive.repeats, r->naive.items_per_s_min, r->naive.items_per_s_max,
                naive_tokens_per_s(r), naive_tokens_per_s(r) * (double)r->token_bytes,
                mean * (double)r->token_bytes, mean, mean);
    }
    return gb_close_output(f, path, removed);
}

/* ---- JSON ------------------------------------------------------------------------------- */

static double fin(double v) {
    return isfinite(v) ? v : 0;
}

int gb_write_json(const gb_run *r, const char *path, int *removed) {
    const gb_opts *o = r->o;
    FILE *f = fopen(path, "w");
    if (!f) return gb_close_output(NULL, path, removed);
    char arr[128];
    fprintf(f, "{\"tool\":\"gp-bench\",\"version\":");
    gb_json_str(f, gp_version());
    fprintf(f, ",\"date\":");
    gb_json_str(f, r->date);
    fprintf(f, ",\"machine\":");
    gb_json_str(f, r->machine);
    fprintf(f, ",\"command\":");
    gb_json_str(f, o->command);
    fprintf(f, ",\"workload\":");
    gb_json_str(f, r->workload_desc);
    fprintf(f, ",\"backend\":\"%s\",\"fell_back\":%s,\"fallback_reason\":",
            gp_backend_name(r->backend), r->fell_back ? "true" : "false");
    gb_json_str(f, r->fell_back ? r->fallback_reason : "");
    /* What the model computed in (the workload string quotes --precision as given): the host
       computes in fp32 whatever was asked (model.h); null for the synthetic workload. */
    if (strcmp(o->workload, "synthetic") == 0)
        fprintf(f, ",\"precision\":null");
    else
        fprintf(f, ",\"precision\":\"%s\"",
                r->backend == GP_BACKEND_HOST || !o->precision ? "fp32" : o->precision);
    fprintf(f,
            ",\"cuda_graphs\":%s,\"spin_wait\":%s,\"arrival\":", o->cuda_graphs ? "true" : "false",
            o->spin_wait ? "true" : "false");
    gb_json_str(f, arrival_name(o, arr, sizeof arr));
    fprintf(f, ",\"duration_s\":%.6g,\"warmup_s\":%.6g,\"lengths\":", o->duration_s, o->warmup_s);
    if (varlen(r)) {
        fprintf(f, "{\"spec\":");
        gb_json_str(f, r->lengths_spec);
        fprintf(f,
                ",\"token_bytes\":%zu,\"mean_tokens\":%.6g,\"p50_tokens\":%u,"
                "\"p99_tokens\":%u,\"packing\":[",
                r->token_bytes, fin(r->mean_tokens), r->p50_tokens, r->p99_tokens);
        for (int i = 0; i < o->npacking; i++)
            fprintf(f, "%s\"%s\"", i ? "," : "", gb_packing_name(o->packing[i]));
        fputs("]}", f);
    } else {
        fputs("null", f);
    }
    fprintf(f, ",\"points\":[");
    for (int i = 0; i < r->npts; i++) {
        const gb_point *p = &r->pts[i];
        fprintf(f,
                "%s{\"batch\":%zu,\"inflight\":%d,\"producers\":%d,\"max_delay_us\":%u,"
                "\"window_s\":%.6g,\"completed\":%llu,\"failed\":%llu,\"items_per_s\":%.6g,"
                "\"items_per_s_min\":%.6g,\"items_per_s_max\":%.6g,\"repeats\":%d,"
                "\"offered_per_s\":%.6g,\"p50_us\":%.6g,\"p95_us\":%.6g,\"p99_us\":%.6g,"
                "\"compute_busy\":%.6g,\"h2d_busy\":%.6g,\"d2h_busy\":%.6g,\"h2d_gbps\":%.6g,"
                "\"d2h_gbps\":%.6g,\"enqueue_us\":%.6g,\"launch_us\":%.6g,\"mean_batch\":%.6g,"
                "\"verdict\":\"%s\","
                "\"bottleneck\":\"%s\",\"window_batches\":%llu,"
                "\"bound\":{\"items_per_s\":%.6g,\"h2d_us\":%.6g,\"compute_us\":%.6g,"
                "\"d2h_us\":%.6g,\"compute_threads\":%d,\"compute_cpu_in_slot\":%s,"
                "\"pipeline_over_bound\":%.6g,"
                "\"above_bound\":%s,\"note\":",
                i ? "," : "", p->batch, p->inflight, p->producers, p->delay_us, fin(p->window_s),
                (unsigned long long)p->completed, (unsigned long long)p->failed,
                fin(p->items_per_s), fin(p->items_per_s_min), fin(p->items_per_s_max), p->repeats,
                fin(p->offered_per_s), fin(p->p50_us), fin(p->p95_us), fin(p->p99_us),
                fin(p->compute_busy), fin(p->h2d_busy), fin(p->d2h_busy), fin(p->h2d_gbps),
                fin(p->d2h_gbps), fin(p->enqueue_us), fin(p->launch_us), fin(p->mean_batch),
                gp_verdict_name(p->verdict), gp_verdict_name(p->bottleneck),
                (unsigned long long)p->window_batches, fin(p->bound_items_per_s),
                fin(p->bound_h2d_us), fin(p->bound_compute_us), fin(p->bound_d2h_us),
                p->bound_threads, p->bound_in_slot ? "true" : "false", fin(over_bound(p)),
                above_bound(p) ? "true" : "false");
        gb_json_str(f, p->bound_note);
        fprintf(f,
                "},\"packing\":\"%s\",\"tokens_per_s\":%.6g,\"useful_bytes_per_s\":%.6g,"
                "\"h2d_bytes_per_item\":%.6g,\"padding\":%.6g,\"mean_tokens\":%.6g,"
                "\"computed_tokens\":%.6g}",
                gb_packing_name(p->packing), fin(p->tokens_per_s), fin(p->useful_bytes_per_s),
                fin(p->h2d_bytes_per_item), fin(p->padding), fin(p->mean_tokens),
                fin(p->computed_tokens));
    }
    fprintf(f, "],\"naive\":");
    if (r->naive.ran) {
        fprintf(f,
                "{\"items_per_s\":%.6g,\"items_per_s_min\":%.6g,\"items_per_s_max\":%.6g,"
                "\"repeats\":%d,\"p50_us\":%.6g,\"p95_us\":%.6g,\"p99_us\":%.6g,"
                "\"items\":%llu,\"tokens\":%llu,\"tokens_per_s\":%.6g,\"how\":",
                fin(r->naive.items_per_s), fin(r->naive.items_per_s_min),
                fin(r->naive.items_per_s_max), r->naive.repeats, fin(r->naive.p50_us),
                fin(r->naive.p95_us), fin(r->naive.p99_us), (unsigned long long)r->naive.items,
                (unsigned long long)r->naive.tokens, fin(naive_tokens_per_s(r)));
        gb_json_str(f, r->naive.how);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    int best = gb_best_point(r);
    fprintf(f, ",\"ratios\":{\"best_batch\":");
    if (best >= 0)
        fprintf(f, "%zu", r->pts[best].batch);
    else
        fputs("null", f);
    fprintf(f, ",\"pipeline_over_naive\":");
    if (best >= 0 && r->naive.ran && r->naive.items_per_s > 0)
        fprintf(f, "%.6g", r->pts[best].items_per_s / r->naive.items_per_s);
    else
        fputs("null", f);
    fprintf(f, ",\"pipeline_over_bound\":");
    if (best >= 0 && r->pts[best].bound_items_per_s > 0)
        fprintf(f, "%.6g,\"above_bound\":%s", over_bound(&r->pts[best]),
                above_bound(&r->pts[best]) ? "true" : "false");
    else
        fputs("null,\"above_bound\":false", f);
    fputs("}}\n", f);
    return gb_close_output(f, path, removed);
}

/* ---- SVG -------------------------------------------------------------------------------- */

/* XML 1.0 text: the five escapes; a control character other than tab, newline and carriage
   return, or bytes that are not UTF-8, as U+FFFD (neither may stand in an XML document). */
static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        size_t n = gb_utf8_len((const unsigned char *)s);
        if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || n == 0) {
            fputs("&#xFFFD;", f);
            continue;
        }
        if (n > 1) {
            fwrite(s, 1, n, f);
            s += n - 1;
            continue;
        }
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

#define SVG_W 920
#define SVG_H 600
#define PLOT_X0 90
#define PLOT_X1 (SVG_W - 210)

typedef struct panel {
    double y0, y1; /* pixel top and bottom */
    double lo, hi; /* value range */
    int logy;
    int rates; /* tick labels as rates (1.2k, 3.4M) */
} panel;

typedef struct xaxis {
    double lo, hi; /* log2 of batch */
} xaxis;

static double px_x(const xaxis *x, double batch) {
    double l = log2(batch);
    if (x->hi <= x->lo) return (PLOT_X0 + PLOT_X1) / 2.0;
    return PLOT_X0 + (l - x->lo) / (x->hi - x->lo) * (PLOT_X1 - PLOT_X0);
}

static double px_y(const panel *p, double v) {
    double t;
    if (p->logy)
        t = (log10(fmax(v, p->lo)) - log10(p->lo)) / (log10(p->hi) - log10(p->lo));
    else
        t = (v - p->lo) / (p->hi - p->lo);
    return p->y1 - t * (p->y1 - p->y0);
}

static const char *colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                               "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

/* Points of one series share inflight, producers and delay. */
static int same_series(const gb_point *a, const gb_point *b) {
    return a->inflight == b->inflight && a->producers == b->producers &&
           a->delay_us == b->delay_us && a->packing == b->packing;
}

static void axes(FILE *f, const panel *p, const xaxis *x, const gb_run *r, const char *ylabel) {
    fprintf(f,
            "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#444\"/>\n",
            PLOT_X0, p->y0, PLOT_X1 - PLOT_X0, p->y1 - p->y0);
    /* x ticks at the swept batch sizes */
    for (int i = 0; i < r->o->nbatch; i++) {
        double xx = px_x(x, (double)r->o->batch[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", xx,
                p->y0, xx, p->y1);
        fprintf(f,
                "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%zu"
                "</text>\n",
                xx, p->y1 + 14, r->o->batch[i]);
    }
    /* y ticks: 5 linear, or each decade */
    if (p->logy) {
        for (double v = pow(10, floor(log10(p->lo))); v <= p->hi * 1.0001; v *= 10) {
            if (v < p->lo * 0.9999) continue;
            double yy = px_y(p, v);
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                    PLOT_X0, yy, PLOT_X1, yy);
            char lab[32];
            if (p->rates)
                snprintf(lab, sizeof lab, "%s", rate(v).s);
            else
                snprintf(lab, sizeof lab, "%g", v);
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n",
                    PLOT_X0 - 6, yy + 4, lab);
        }
    } else {
        for (int k = 0; k <= 4; k++) {
            double v = p->lo + (p->hi - p->lo) * k / 4, yy = px_y(p, v);
            fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                    PLOT_X0, yy, PLOT_X1, yy);
            fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s</text>\n",
                    PLOT_X0 - 6, yy + 4, rate(v).s);
        }
    }
    fprintf(f,
            "<text x=\"18\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 18 %.1f)\">%s</text>\n",
            (p->y0 + p->y1) / 2, (p->y0 + p->y1) / 2, ylabel);
    fprintf(f,
            "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">batch size "
            "(max_batch)</text>\n",
            (PLOT_X0 + PLOT_X1) / 2, p->y1 + 30);
}

/* The points of pts[i]'s series, by batch size (a line drawn in sweep order would double back
   for --batch 2,16,4). */
static int series_points(const gb_run *r, int i, int *idx) {
    int n = 0;
    for (int j = 0; j < r->npts; j++) {
        if (!same_series(&r->pts[i], &r->pts[j])) continue;
        int k = n++;
        for (; k > 0 && r->pts[idx[k - 1]].batch > r->pts[j].batch; k--)
            idx[k] = idx[k - 1];
        idx[k] = j;
    }
    return n;
}

static void series(FILE *f, const gb_run *r, const panel *p, const xaxis *x, int latency) {
    int done[GB_MAX_POINTS] = {0}, ncolor = 0, idx[GB_MAX_POINTS];
    for (int i = 0; i < r->npts; i++) {
        if (done[i]) continue;
        const char *col = colors[ncolor++ % (int)(sizeof colors / sizeof colors[0])];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        int n = series_points(r, i, idx);
        for (int k = 0; k < n; k++) {
            const gb_point *pt = &r->pts[idx[k]];
            double v = latency ? pt->p99_us / 1e3 : pt->items_per_s;
            fprintf(f, "%.1f,%.1f ", px_x(x, (double)pt->batch), px_y(p, v));
        }
        fprintf(f, "\"/>\n");
        for (int j = i; j < r->npts; j++)
            if (same_series(&r->pts[i], &r->pts[j])) {
                done[j] = 1;
                double v = latency ? r->pts[j].p99_us / 1e3 : r->pts[j].items_per_s;
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                        px_x(x, (double)r->pts[j].batch), px_y(p, v), col);
            }
        double ly = p->y0 + 14 + 16 * (ncolor - 1);
        fprintf(f,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2\"/>\n",
                PLOT_X1 + 10, ly - 4, PLOT_X1 + 28, ly - 4, col);
        fprintf(f,
                "<text x=\"%d\" y=\"%.1f\" font-size=\"11\">%s%sinflight %d, prod %d, delay "
                "%u</text>\n",
                PLOT_X1 + 32, ly,
                r->pts[i].packing == GB_PACK_NONE ? "" : gb_packing_name(r->pts[i].packing),
                r->pts[i].packing == GB_PACK_NONE ? "" : ", ", r->pts[i].inflight,
                r->pts[i].producers, r->pts[i].delay_us);
    }
    if (latency) return;
    double ly = p->y0 + 14 + 16 * ncolor;
    if (r->o->bound) { /* bound per batch size (the first series has them all) */
        fprintf(f, "<polyline fill=\"none\" stroke=\"#777\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"6 4\" points=\"");
        int n = series_points(r, 0, idx);
        for (int k = 0; k < n; k++)
            if (r->pts[idx[k]].bound_items_per_s > 0)
                fprintf(f, "%.1f,%.1f ", px_x(x, (double)r->pts[idx[k]].batch),
                        px_y(p, r->pts[idx[k]].bound_items_per_s));
        fprintf(f,
                "\"/>\n<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#777\" "
                "stroke-dasharray=\"6 4\"/>\n<text x=\"%d\" y=\"%.1f\" font-size=\"11\">bound "
                "(each stage alone)</text>\n",
                PLOT_X1 + 10, ly - 4, PLOT_X1 + 28, ly - 4, PLOT_X1 + 32, ly);
        ly += 16;
    }
    if (r->naive.ran) {
        double yy = px_y(p, r->naive.items_per_s);
        fprintf(f,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#000\" "
                "stroke-dasharray=\"2 3\"/>\n<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                "stroke=\"#000\" stroke-dasharray=\"2 3\"/>\n<text x=\"%d\" y=\"%.1f\" "
                "font-size=\"11\">naive serial loop</text>\n",
                PLOT_X0, yy, PLOT_X1, yy, PLOT_X1 + 10, ly - 4, PLOT_X1 + 28, ly - 4, PLOT_X1 + 32,
                ly);
    }
}

int gb_write_svg(const gb_run *r, const char *path, int *removed) {
    FILE *f = fopen(path, "w");
    if (!f) return gb_close_output(NULL, path, removed);
    xaxis x = {INFINITY, -INFINITY};
    double tmax = 0, tmin = INFINITY, lmin = INFINITY, lmax = 0;
    for (int i = 0; i < r->o->nbatch; i++) {
        x.lo = fmin(x.lo, log2((double)r->o->batch[i]));
        x.hi = fmax(x.hi, log2((double)r->o->batch[i]));
    }
    for (int i = 0; i < r->npts; i++) {
        const gb_point *p = &r->pts[i];
        tmax = fmax(tmax, fmax(p->items_per_s, p->bound_items_per_s));
        if (p->items_per_s > 0) tmin = fmin(tmin, p->items_per_s);
        if (p->p99_us > 0) {
            lmin = fmin(lmin, p->p99_us / 1e3);
            lmax = fmax(lmax, p->p99_us / 1e3);
        }
    }
    if (r->naive.ran) tmax = fmax(tmax, r->naive.items_per_s);
    if (r->naive.ran && r->naive.items_per_s > 0) tmin = fmin(tmin, r->naive.items_per_s);
    if (tmax <= 0) tmax = 1;
    if (!(lmin < INFINITY) || lmax <= 0) lmin = 0.01, lmax = 1;
    /* Items/s on a linear scale, or by decades where the lowest is under 1/30 of the highest
       (on a GPU the naive loop and batch 1 would otherwise sit on the axis). */
    int tlog = tmin < INFINITY && tmax / tmin > 30;
    panel top = {60, 275, 0, tmax * 1.1, 0, 1};
    if (tlog) {
        top.lo = pow(10, floor(log10(tmin)));
        top.hi = pow(10, ceil(log10(tmax * 1.1)));
        top.logy = 1;
    }
    panel bot = {340, 540, pow(10, floor(log10(lmin))), pow(10, ceil(log10(lmax))), 1, 0};
    if (bot.hi <= bot.lo) bot.hi = bot.lo * 10;

    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
            SVG_W, SVG_H, SVG_W, SVG_H);
    fprintf(f,
            "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">gp-bench: items/s "
            "and p99 latency against batch size (backend %s%s)</text>\n",
            PLOT_X0, gp_backend_name(r->backend), r->fell_back ? ", AUTO fell back" : "");
    /* The workload on up to two lines, split at "; ". */
    const char *desc = r->workload_desc, *cut = strstr(desc, "; ");
    size_t first = cut && strlen(desc) > 100 ? (size_t)(cut - desc) : strlen(desc);
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)first, desc);
    fprintf(f, "<text x=\"%d\" y=\"34\" font-size=\"11\">", PLOT_X0);
    xml_text(f, line);
    fprintf(f, "</text>\n");
    if (desc[first]) {
        fprintf(f, "<text x=\"%d\" y=\"46\" font-size=\"11\">", PLOT_X0);
        xml_text(f, desc + first + 2);
        fprintf(f, "</text>\n");
    }
    axes(f, &top, &x, r, tlog ? "items/s (log)" : "items/s");
    series(f, r, &top, &x, 0);
    axes(f, &bot, &x, r, "p99 latency, ms (log)");
    series(f, r, &bot, &x, 1);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"#666\">", PLOT_X0, SVG_H - 12);
    xml_text(f, r->date);
    fputs(", ", f);
    xml_text(f, r->machine);
    fputs(": ", f);
    char cmdline[120];
    const char *cmd = r->o->command ? r->o->command : "gp-bench";
    snprintf(cmdline, sizeof cmdline, "%.110s", cmd);
    if (strlen(cmd) > 110) /* long sweeps: the outputs hold the full command */
        memcpy(cmdline + 106, "...", 4);
    xml_text(f, cmdline);
    fprintf(f, "</text>\n</svg>\n");
    return gb_close_output(f, path, removed);
}

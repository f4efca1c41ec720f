/*
 * The doctor: gp_stats_diagnose turns a snapshot or a window into a verdict (the bottleneck,
 * the numbers that prove it, the knob to turn). A pure function of gp_stats: nothing here
 * reads a pipeline or writes anywhere. The renderings (render.c) print what it decides.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include "fmt.h"
#include "stats.h"

/* A resource busy at least this fraction of wall time is saturated: it is the bottleneck. */
#define SATURATED 0.70
/* The batcher waited for a free slot at least this fraction of wall time. */
#define SLOTS_FULL 0.50
/* The batcher found no item at least this fraction of wall time. */
#define STARVED 0.40
/* At least this share of the computed elements were padding (gp_batch_report_padding). */
#define PADDED (1.0 / 3.0)

/* ---- verdict names ---------------------------------------------------------------------- */

static const struct {
    const char *name, *title;
} verdicts[GP_VERDICT_COUNT_] = {
#define GP__VERDICT_ROW(NAME, value, name, title) [GP_VERDICT_##NAME] = {name, title},
    GP_VERDICT_MAP(GP__VERDICT_ROW)
#undef GP__VERDICT_ROW
};

const char *gp_verdict_name(gp_verdict v) {
    return (unsigned)v < GP_VERDICT_COUNT_ ? verdicts[v].name : "unknown";
}

const char *gp__verdict_title(gp_verdict v) {
    return (unsigned)v < GP_VERDICT_COUNT_ ? verdicts[v].title : "unknown";
}

/* ---- the doctor ------------------------------------------------------------------------- */

static void say(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* A clause after what buf holds already: all of it, or none where it would not fit (a text is
   never cut mid-clause; test_diagnose holds the longest combinations to fit). */
static void say_more(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say_more(char *buf, size_t len, const char *fmt, ...) {
    char more[sizeof((gp_diagnosis *)0)->why];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(more, sizeof more, fmt, ap);
    va_end(ap);
    size_t n = strlen(buf);
    if (m < 0 || (size_t)m >= sizeof more || n + (size_t)m + 1 > len) return;
    memcpy(buf + n, more, (size_t)m + 1);
}

/* Put a clause before the knob: "<clause>; then: <the knob>", the knob only where it fits
   whole. */
static void lead(gp_diagnosis *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lead(gp_diagnosis *d, const char *fmt, ...) {
    char was[sizeof d->knob];
    memcpy(was, d->knob, sizeof was);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->knob, sizeof d->knob, fmt, ap);
    va_end(ap);
    if (was[0]) say_more(d->knob, sizeof d->knob, "; then: %s", was);
}

/* "h2d 12%, compute 95%, d2h 3%" */
static void stage_mix(const gp_diagnosis *d, char *buf, size_t len) {
    say(buf, len, "h2d %.0f%%, compute %.0f%%, d2h %.0f%%", gp__pct(d->h2d), gp__pct(d->compute),
        gp__pct(d->d2h));
}

/* The mean size of the batches that did not fill (max_batch items each left as "full"): the
   small-batches rule's "carrying", which full batches beside them must not hide. */
static double short_mean(const gp_stats *s, const gp_diagnosis *d) {
    uint64_t full = s->close_reasons[GP_CLOSE_FULL], rest = s->batches - full;
    if (s->batches <= full || s->batch_items < full * s->max_batch) return d->mean_batch;
    return (double)(s->batch_items - full * s->max_batch) / (double)rest;
}

/* Batches that average under a quarter of max_batch: more items would ride nearly free. */
static int small_batches(const gp_stats *s, const gp_diagnosis *d) {
    return d->mean_batch * 4 < (double)s->max_batch;
}

/* Bytes one item moved: the copies' bytes over the items batched (variable-size items have no
   item_in_bytes / item_out_bytes; for fixed-size ones this is those). */
static double per_item_bytes(const gp_stats *s, uint64_t bytes, uint64_t item_bytes) {
    return s->batch_items ? (double)bytes / (double)s->batch_items : (double)item_bytes;
}

static void explain(const gp_stats *s, gp_diagnosis *d) {
    char mix[64];
    stage_mix(d, mix, sizeof mix);
    double per_item = s->completed ? 1.0 / (double)s->completed : 0; /* x busy ns */
    switch (d->bottleneck) {
    case GP_VERDICT_NO_WORK:
        if (s->batches)
            say(d->why, sizeof d->why,
                "%" PRIu64 " item%s submitted, no batch completed in this snapshot or window "
                "(%" PRIu64 " dispatched, still running)",
                s->submitted, s->submitted == 1 ? "" : "s", s->batches);
        else
            say(d->why, sizeof d->why,
                "%" PRIu64 " item%s submitted, no batch dispatched in this snapshot or window%s",
                s->submitted, s->submitted == 1 ? "" : "s",
                s->completed ? " (its callbacks are of batches dispatched before it)" : "");
        say(d->knob, sizeof d->knob,
            s->batches ? "wait for the batches in flight to complete, then ask again (a longer "
                         "window)"
                       : "submit work, then ask again");
        break;
    case GP_VERDICT_PRODUCERS: {
        char held[80] = "";
        if (d->delay_wait >= 0.01)
            say(held, sizeof held, " and held a partial batch for max_delay_us %.0f%%",
                gp__pct(d->delay_wait));
        say(d->why, sizeof d->why,
            "compute busy %.0f%%: producers submit %s items/s, the device could take ~%s "
            "items/s at batches of %.1f; the batcher found no item %.0f%% of the time%s: the "
            "GPU is starved",
            gp__pct(d->compute), gp__fmt_count((double)s->submitted / d->wall_s).s,
            gp__fmt_count(d->device_items_per_s).s, d->mean_batch, gp__pct(d->starved), held);
        if (d->compute >= SATURATED) /* busy only because each batch carries so few */
            say_more(d->why, sizeof d->why,
                     " (compute is busy because each batch carries %.1f items: more load fills "
                     "batches at little extra device time)",
                     d->mean_batch);
        if (d->delay_wait > d->starved) /* the user's own delay holds the items */
            say(d->knob, sizeof d->knob,
                "lower max_delay_us (now %u us) if latency matters: the batcher held partial "
                "batches for it %.0f%% of the time, waiting for items that come slowly; more "
                "producers fill batches sooner; if this is simply the offered load, the GPU has "
                "headroom",
                s->max_delay_us, gp__pct(d->delay_wait));
        else
            say(d->knob, sizeof d->knob,
                "add producer threads, or move pre-processing off the producers (prep_workers "
                "with gp_pipeline_submit_prep); if this is simply the offered load, the GPU has "
                "headroom");
        break;
    }
    case GP_VERDICT_PREP:
        say(d->why, sizeof d->why,
            "prep workers busy %.0f%% (%d worker%s, %s of prep per item) while compute is busy "
            "%.0f%% and the batcher found no item waiting %.0f%% of the time",
            gp__pct(d->prep), s->prep_workers, s->prep_workers == 1 ? "" : "s",
            gp__fmt_ns((double)s->prep_busy_ns * per_item).s, gp__pct(d->compute),
            gp__pct(d->starved));
        say(d->knob, sizeof d->knob,
            "raise prep_workers (now %d) if cores are free, make prep cheaper, or move the "
            "transform to the GPU (u8 input with a normalize kernel, which also cuts H2D bytes "
            "4x)",
            s->prep_workers);
        break;
    case GP_VERDICT_H2D:
        say(d->why, sizeof d->why,
            "H2D copies busy %.0f%% of the time moving %.2f GB/s (%s per item, %s) while "
            "compute is busy %.0f%%",
            gp__pct(d->h2d), d->h2d_gbps,
            gp__fmt_bytes(per_item_bytes(s, s->h2d_bytes, s->item_in_bytes)).s, mix,
            gp__pct(d->compute));
        say(d->knob, sizeof d->knob,
            "send fewer bytes: u8 or fp16 inputs normalized on the device, crop or resize "
            "before submit; check the link (nvidia-smi -q: PCIe generation and width). The "
            "ring is already pinned and each batch moves in one copy");
        break;
    case GP_VERDICT_D2H:
        say(d->why, sizeof d->why,
            "D2H copies busy %.0f%% of the time moving %.2f GB/s (%s per item, %s) while "
            "compute is busy %.0f%%",
            gp__pct(d->d2h), d->d2h_gbps,
            gp__fmt_bytes(per_item_bytes(s, s->d2h_bytes, s->item_out_bytes)).s, mix,
            gp__pct(d->compute));
        say(d->knob, sizeof d->knob,
            "return less: argmax, top-k or softmax on the device (post-processing kernels), "
            "fp16 outputs, only the fields the caller reads");
        break;
    case GP_VERDICT_COMPUTE: {
        say(d->why, sizeof d->why,
            "compute busy %.0f%% of wall time (%s), %s per batch of %.1f items (max_batch "
            "%" PRIu64 "), %s items/s, p99 latency %s",
            gp__pct(d->compute), mix, gp__fmt_ns(d->batch_compute_us * 1e3).s, d->mean_batch,
            s->max_batch, gp__fmt_count(d->items_per_s).s, gp__fmt_ns((double)s->latency_p99).s);
        /* Small batches: closed by the byte budget (variable-size items), only a larger budget
           helps; closed early otherwise, a delay or preferred sizes do. */
        int by_bytes = s->batches && s->close_bytes * 2 >= s->batches;
        int small = small_batches(s, d);
        /* One slot: the copies of the next batch wait for this compute; slots would help. */
        int serial = s->inflight == 1 && d->h2d + d->d2h > 0.05 && d->compute < 0.95;
        /* Graphs: the CUDA backend's, for fixed-size items only (gp_config.cuda_graphs). */
        int graphs = s->backend == GP_BACKEND_CUDA && !s->cuda_graphs && s->item_in_bytes &&
                     s->item_out_bytes;
        /* Small batches with a batcher that found no item: each batch pays the compute's
           fixed cost for few items, and more offered load fills them (more producers help). */
        int hungry = small && !by_bytes && d->starved >= 0.10;
        /* The advice first, then what the numbers add (a clause that would not fit is
           left out whole, the advice never). */
        say(d->knob, sizeof d->knob,
            "to go faster make the compute cheaper: fp16/bf16 or tf32 tensor cores, fused "
            "layers%s; raise max_batch if latency allows.",
            graphs ? ", CUDA graphs for small models (cuda_graphs=1)" : "");
        if (serial)
            say_more(d->knob, sizeof d->knob,
                     " inflight=1 runs the copies in series with the compute: raise inflight.");
        if (hungry)
            say_more(d->knob, sizeof d->knob,
                     " Batches average %.1f of %" PRIu64 " and the batcher found no item %.0f%% "
                     "of the time: more producers, a max_delay_us or preferred sizes fill them.",
                     d->mean_batch, s->max_batch, gp__pct(d->starved));
        else if (small && by_bytes)
            say_more(d->knob, sizeof d->knob,
                     " Batches close on the byte budget (close reason bytes): a larger "
                     "max_batch_bytes (and arena_bytes: a nearly full arena closes batches "
                     "early) lets each carry more items.");
        else if (small)
            say_more(d->knob, sizeof d->knob,
                     " Batches average far below max_batch: a max_delay_us or preferred sizes "
                     "let each batch carry more items.");
        if (!serial && !small)
            say_more(d->knob, sizeof d->knob, " More producers or slots will not help");
        break;
    }
    case GP_VERDICT_PADDING:
        say(d->why, sizeof d->why,
            "compute busy %.0f%% of wall time (%s), and %.0f%% of the elements the compute "
            "processed were padding (%" PRIu64 " useful of %" PRIu64
            " reported): the GPU is busy doing nothing useful for that share",
            gp__pct(d->compute), mix, gp__pct(d->padding), s->pad_useful, s->pad_total);
        say(d->knob, sizeof d->knob,
            "stop padding: submit variable-size items (config.max_item_in_bytes) and let the "
            "compute work on the packed batch through gp_batch's offsets; where the model needs a "
            "padded tensor, a byte budget (max_batch_bytes) keeps lengths in a batch closer, and "
            "so does grouping requests by length before submitting");
        break;
    case GP_VERDICT_CALLBACKS:
        say(d->why, sizeof d->why,
            "completion workers busy %.0f%% (%d worker%s, %s in callbacks per item) while "
            "compute is busy %.0f%%; callbacks hold ring slots, so producers wait for space "
            "(back-pressure %.2f producer-s per s)",
            gp__pct(d->callbacks), s->completion_workers, s->completion_workers == 1 ? "" : "s",
            gp__fmt_ns((double)s->callback_busy_ns * per_item).s, gp__pct(d->compute),
            d->backpressure);
        say(d->knob, sizeof d->knob,
            "keep callbacks short (copy the output and hand it to your own queue), raise "
            "completion_workers (now %d) if cores are free (callbacks that use the CPU gain "
            "nothing from more workers than free cores; they then run out of submit order), or "
            "shrink post-processing with device kernels (softmax, argmax, top-k)",
            s->completion_workers);
        break;
    case GP_VERDICT_SMALL_BATCHES: {
        double full_ms = d->items_per_s > 0 ? (double)s->max_batch / d->items_per_s * 1e3 : 0;
        say(d->why, sizeof d->why,
            "%.0f%% of batches left on the %u us max_delay_us timer, those short of max_batch "
            "with a mean of %.1f items (max_batch %" PRIu64 "): at %s items/s a full batch needs "
            "%.1f ms, so every item waits for the timer (queue wait p50 %s) while compute is busy "
            "only %.0f%%",
            100.0 * (double)s->close_reasons[GP_CLOSE_DELAY] / (double)s->batches, s->max_delay_us,
            short_mean(s, d), s->max_batch, gp__fmt_count(d->items_per_s).s, full_ms,
            gp__fmt_ns((double)s->queue_wait_p50).s, gp__pct(d->compute));
        say(d->knob, sizeof d->knob,
            "if latency matters, lower max_delay_us (0 = dispatch as soon as a slot is free; "
            "a batch still grows while every slot is busy) or set a preferred size below the "
            "%.1f items the timer collects (a batch leaves as soon as it reaches one); if "
            "device time per item matters, raise the delay toward %.1f ms (a full batch)",
            short_mean(s, d), full_ms);
        break;
    }
    case GP_VERDICT_ENQUEUE: {
        if (s->backend == GP_BACKEND_HOST) {
            /* Host: every stage is a push to the slot's thread, a cost per batch whatever it
               carries. Larger batches are the lever (measured, 2-core VM: max_batch 1 -> 16 at
               inflight 16, 87k -> 1.47M items/s; fewer slots made it slower: inflight 2, 26k). */
            say(d->why, sizeof d->why,
                "the batcher spends %.0f%% of wall time dispatching: %s of host work per batch "
                "(handing its copies and compute to the slot's thread) vs %s of compute per "
                "batch; the slots wait for the batcher",
                gp__pct(d->enqueue), gp__fmt_ns(d->batch_enqueue_us * 1e3).s,
                gp__fmt_ns(d->batch_compute_us * 1e3).s);
            say(d->knob, sizeof d->knob,
                "raise max_batch so each batch carries more work: the hand-off costs the same per "
                "batch whatever it carries (fewer slots do not help: the slot threads mostly "
                "wait)");
            break;
        }
        /* launch_ns: the compute's share of the enqueue (0: a caller's older gp_stats). */
        double launch_us = s->batches ? (double)s->launch_ns / (double)s->batches / 1e3 : 0;
        char part[64] = " + compute launch";
        if (s->launch_ns)
            snprintf(part, sizeof part, ", the compute's launch %s of it",
                     gp__fmt_ns(launch_us * 1e3).s);
        say(d->why, sizeof d->why,
            "the batcher spends %.0f%% of wall time enqueuing: %s of host work per batch "
            "(copies and events%s) vs %s of device compute per batch; the GPU waits for the "
            "CPU to launch",
            gp__pct(d->enqueue), gp__fmt_ns(d->batch_enqueue_us * 1e3).s, part,
            gp__fmt_ns(d->batch_compute_us * 1e3).s);
        if (s->launch_ns && 2 * launch_us < d->batch_enqueue_us)
            say(d->knob, sizeof d->knob,
                "the copies and events, not the compute's launch (%s of %s per batch), take "
                "most of the enqueue: raise max_batch so each batch carries more items (CUDA "
                "graphs shorten only the launch)",
                gp__fmt_ns(launch_us * 1e3).s, gp__fmt_ns(d->batch_enqueue_us * 1e3).s);
        else if (s->cuda_graphs && s->graph_eager)
            say(d->knob, sizeof d->knob,
                "CUDA graphs are on but %" PRIu64 " batches ran eager (%s): fix that; fuse "
                "kernels or raise max_batch so each launch carries more items",
                s->graph_eager, s->graph_eager_reason[0] ? s->graph_eager_reason : "no reason");
        else
            say(d->knob, sizeof d->knob,
                "capture the compute in CUDA graphs (cuda_graphs=1: one launch per batch), "
                "fuse kernels, or raise max_batch so each launch carries more items");
        break;
    }
    case GP_VERDICT_INFLIGHT:
        say(d->why, sizeof d->why,
            "a batch waited for a free slot %.0f%% of the time, yet no stage is busy more than "
            "%.0f%% (%s): with inflight=%d %s",
            gp__pct(d->saturated), gp__pct(fmax(d->h2d, fmax(d->compute, d->d2h))), mix,
            s->inflight,
            s->inflight < 3 ? "the copies and compute of consecutive batches cannot overlap"
                            : "the slots spend their time between batches, not in the stages");
        if (s->inflight < 3)
            say(d->knob, sizeof d->knob, "raise inflight (now %d) to 3 or more", s->inflight);
        else if (s->backend == GP_BACKEND_HOST) /* the turnaround costs per batch: fill them */
            say(d->knob, sizeof d->knob,
                "raise max_batch so each batch carries more work (a slot's turnaround between "
                "batches costs the same whatever a batch carries), or inflight (now %d)",
                s->inflight);
        else /* docs/DESIGN.md §2, "A slot's cycle" (measured on an H200) */
            say(d->knob, sizeof d->knob,
                "raise inflight (now %d): a slot's cycle is its three stages plus its turnaround "
                "between batches, which short stages leave uncovered; %s",
                s->inflight,
                s->spin_wait ? "spin_wait is on already, so more slots or longer stages (larger "
                               "batches) are what is left"
                             : "on CUDA, spin_wait=1 shortens the turnaround");
        break;
    case GP_VERDICT_MIXED:
    default:
        say(d->why, sizeof d->why,
            "no stage is saturated (%s, callbacks %.0f%%, prep %.0f%%, enqueue %.0f%%), the "
            "batcher was starved %.0f%%, held batches for the delay %.0f%% and waited for a "
            "slot %.0f%% of the time",
            mix, gp__pct(d->callbacks), gp__pct(d->prep), gp__pct(d->enqueue), gp__pct(d->starved),
            gp__pct(d->delay_wait), gp__pct(d->saturated));
        say(d->knob, sizeof d->knob,
            "sweep batch size, inflight and producers with gp-bench and watch which number "
            "moves");
        break;
    }
    /* Busy time counts when a batch completes: with few batches, one still running is missing
       from the fractions. */
    if (d->bottleneck != GP_VERDICT_NO_WORK && s->batches < 4) {
        say_more(d->why, sizeof d->why,
                 " (only %" PRIu64 " batch%s dispatched: judge a longer window)", s->batches,
                 s->batches == 1 ? "" : "es");
        lead(d,
             "judge a longer window first: with %" PRIu64 " batch%s the busy times miss any "
             "batch still running",
             s->batches, s->batches == 1 ? "" : "es");
    }
    /* Most callbacks not results: that is what to fix, before any speed. */
    if (s->completed && s->failed * 2 >= s->completed)
        lead(d,
             "fix the failures first: %" PRIu64 " of %" PRIu64 " callbacks failed "
             "(gp_pipeline_last_error names the first)",
             s->failed, s->completed);
    else if (s->completed && s->timed_out * 2 >= s->completed)
        lead(d,
             "most items time out (%" PRIu64 " of %" PRIu64 "): their deadlines are shorter than "
             "a batch's wait and compute (latency p50 %s); lower max_batch or lengthen the "
             "deadlines",
             s->timed_out, s->completed, gp__fmt_ns((double)s->latency_p50).s);
    /* Callbacks that were not results: items/s counts them (a deadline passed, a cancel, a
       failure), so say how many and the rate of results. */
    uint64_t other = s->timed_out + s->canceled + s->failed;
    if (s->completed && other * 20 >= s->completed)
        say_more(d->why, sizeof d->why,
                 "; %.0f%% of callbacks not results (timed out %" PRIu64 ", canceled %" PRIu64
                 ", failed %" PRIu64 "), %s items/s OK",
                 100.0 * (double)other / (double)s->completed, s->timed_out, s->canceled, s->failed,
                 gp__fmt_count((double)s->completed_ok / d->wall_s).s);
}

void gp__diagnose(const gp_stats *s, gp_diagnosis *d) {
    memset(d, 0, sizeof *d);
    d->struct_size = sizeof *d;
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
    /* A window can split one report's two counters (its mark between them): never below 0. */
    d->padding = s->pad_total && s->pad_useful < s->pad_total
                     ? 1.0 - (double)s->pad_useful / (double)s->pad_total
                     : 0.0;

    gp_verdict v = GP_VERDICT_MIXED;
    if (s->batches == 0 || s->completed == 0) {
        /* No batch dispatched, or none completed yet (a completed batch has run callbacks):
           the busy fractions have nothing to say. */
        v = GP_VERDICT_NO_WORK;
    } else {
        /* The busiest resource, if it is saturated, limits everything upstream of it. */
        struct {
            gp_verdict v;
            double busy;
        } res[] = {
            {GP_VERDICT_COMPUTE, d->compute},
            {GP_VERDICT_H2D, d->h2d},
            {GP_VERDICT_D2H, d->d2h},
            {GP_VERDICT_CALLBACKS, d->callbacks},
            {GP_VERDICT_PREP, d->prep},
            /* The batcher's launch work counts only when it exceeds the device's work. */
            {GP_VERDICT_ENQUEUE, d->batch_enqueue_us > d->batch_compute_us ? d->enqueue : 0},
        };
        double best = 0;
        for (size_t i = 0; i < sizeof res / sizeof res[0]; i++)
            if (res[i].busy > best) {
                best = res[i].busy;
                v = res[i].v;
            }
        if (best < SATURATED) {
            if (s->max_delay_us > 0 && 2 * s->close_reasons[GP_CLOSE_DELAY] >= s->batches &&
                2 * short_mean(s, d) <= (double)s->max_batch)
                v = GP_VERDICT_SMALL_BATCHES;
            else if (d->saturated >= SLOTS_FULL)
                v = GP_VERDICT_INFLIGHT;
            else if (d->starved + d->delay_wait >= STARVED) /* waiting for input */
                v = GP_VERDICT_PRODUCERS;
            else
                v = GP_VERDICT_MIXED;
        }
    }
    /* Compute "saturated" by tiny batches while the batcher mostly found nothing to send: the
       items come too slowly to fill batches; more load would fill them at little extra device
       time. The producers are the limit (a delay would only add latency). */
    if (v == GP_VERDICT_COMPUTE && d->starved >= STARVED && small_batches(s, d))
        v = GP_VERDICT_PRODUCERS;
    /* Saturated compute of which a large share is padding: the padding is what to fix. */
    if (v == GP_VERDICT_COMPUTE && d->padding >= PADDED) v = GP_VERDICT_PADDING;
    d->bottleneck = v;
    d->verdict = s->fell_back ? GP_VERDICT_GPU_NOT_USED : v;
    explain(s, d);
}

int gp_stats_diagnose(const gp_stats *s, gp_diagnosis *d) {
    if (!gp__stats_size_ok(s) || !d ||
        d->struct_size < offsetof(gp_diagnosis, verdict) + sizeof d->verdict ||
        d->struct_size > sizeof *d)
        return GP_EINVAL;
    gp_stats full;
    gp__stats_widen(s, &full);
    gp_diagnosis all;
    gp__diagnose(&full, &all);
    size_t n = d->struct_size;
    memcpy(d, &all, n);
    d->struct_size = n;
    return GP_OK;
}

/*
 * gp_stats_diagnose from counters: the rules behind each verdict and their order, on crafted
 * snapshots; its argument checks, struct_size handling and the pinned verdict names. This is where
 * "enqueue" (host launch work longer than the device compute, the CUDA-graphs case) is tested: the
 * host backend's launch is a queue push and cannot show it. test_doctor reproduces the other
 * verdicts on a running pipeline.
 */
#include <string.h>

#include <stddef.h>

#include "gpt.h"

#define MS 1000000ull

/* One second of a healthy-looking pipeline: 1000 batches of 64, nothing saturated. */
static gp_stats base(void) {
    gp_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.backend = GP_BACKEND_CUDA;
    s.wall_ns = 1000 * MS;
    s.batches = 1000;
    s.batch_items = s.submitted = s.completed = s.completed_ok = 64000;
    s.batch_hist[7] = 1000;
    s.close_reasons[GP_CLOSE_SLOT_FREE] = 1000;
    s.max_batch = 64;
    s.capacity = 1024;
    s.item_in_bytes = 4096;
    s.item_out_bytes = 64;
    s.inflight = 3;
    s.completion_workers = 1;
    s.h2d_busy_ns = 200 * MS;
    s.compute_busy_ns = 400 * MS;
    s.d2h_busy_ns = 20 * MS;
    s.callback_busy_ns = 100 * MS;
    s.enqueue_ns = 20 * MS;
    s.h2d_bytes = 64000ull * 4096;
    s.d2h_bytes = 64000ull * 64;
    s.latency_p50 = 2 * MS;
    s.latency_p99 = 4 * MS;
    return s;
}

static gp_verdict verdict(const gp_stats *s, const char *must_say) {
    gp_diagnosis d = {.struct_size = sizeof d};
    GPT_RC(gp_stats_diagnose(s, &d), GP_OK);
    printf("%-14s why: %s\n%14s knob: %s\n", gp_verdict_name(d.verdict), d.why, "", d.knob);
    if (must_say && !strstr(d.why, must_say) && !strstr(d.knob, must_say)) {
        fprintf(stderr, "diagnosis does not say '%s'\n", must_say);
        GPT_CHECK(0);
    }
    return d.verdict;
}

/* Whether the diagnosis's why or knob says `text`. */
static int says(const gp_stats *s, const char *text) {
    gp_diagnosis d = {.struct_size = sizeof d};
    GPT_RC(gp_stats_diagnose(s, &d), GP_OK);
    return strstr(d.why, text) || strstr(d.knob, text);
}

int main(void) {
    gp_stats s = base();
    GPT_EQ(verdict(&s, "no stage is saturated"), GP_VERDICT_MIXED);

    /* Each saturated resource names itself; the busiest wins. */
    s = base();
    s.compute_busy_ns = 950 * MS;
    GPT_EQ(verdict(&s, "compute busy 95%"), GP_VERDICT_COMPUTE);
    GPT_EQ(verdict(&s, "CUDA graphs for small models (cuda_graphs=1)"), GP_VERDICT_COMPUTE);
    s.cuda_graphs = 1; /* on already: not advised again */
    GPT_CHECK(!says(&s, "cuda_graphs=1") && !says(&s, "CUDA graphs"));
    s.cuda_graphs = 0;
    s.backend = GP_BACKEND_HOST; /* no graphs to advise on the host backend */
    GPT_CHECK(!says(&s, "cuda_graphs=1"));
    s.backend = GP_BACKEND_CUDA;
    s.item_in_bytes = 0; /* variable-size items: create refuses graphs, so no advice of them */
    GPT_CHECK(!says(&s, "cuda_graphs=1"));
    s.item_in_bytes = 4096;
    /* Batches closed by the byte budget: only a larger budget lets them carry more. */
    s.batch_items = s.submitted = s.completed = s.completed_ok = 8000;
    s.close_reasons[GP_CLOSE_SLOT_FREE] = 100;
    s.close_bytes = 900;
    GPT_EQ(verdict(&s, "a larger max_batch_bytes"), GP_VERDICT_COMPUTE);
    GPT_CHECK(!says(&s, "max_delay_us"));
    s.close_reasons[GP_CLOSE_SLOT_FREE] = 1000;
    s.close_bytes = 0;
    GPT_EQ(verdict(&s, "a max_delay_us or preferred sizes"), GP_VERDICT_COMPUTE);
    /* Small batches are never told "more producers will not help" (batches of 2.4 of 64 at
       100% compute ran 4x faster with 4x the producers); with a starved batcher, more
       producers are the advice. */
    GPT_CHECK(!says(&s, "will not help"));
    s.starved_ns = 360 * MS;
    GPT_EQ(verdict(&s, "the batcher found no item 36% of the time"), GP_VERDICT_COMPUTE);
    GPT_CHECK(says(&s, "more producers, a max_delay_us or preferred sizes fill them"));
    s.starved_ns = 0;
    s.batch_items = 64000; /* full batches: more load cannot help */
    GPT_EQ(verdict(&s, "More producers or slots will not help"), GP_VERDICT_COMPUTE);
    s.batch_items = s.submitted = s.completed = s.completed_ok = 64000;
    s.h2d_busy_ns = 970 * MS;
    GPT_EQ(verdict(&s, "H2D copies busy 97%"), GP_VERDICT_H2D);
    GPT_CHECK(says(&s, "4.0 KiB per item"));
    /* Variable-size items (no item_in_bytes / item_out_bytes): bytes per item from the copies. */
    s.item_in_bytes = s.item_out_bytes = 0;
    s.h2d_bytes = 64000ull * 2560;
    GPT_EQ(verdict(&s, "2.5 KiB per item"), GP_VERDICT_H2D);
    s.h2d_busy_ns = 200 * MS;
    s.d2h_busy_ns = 970 * MS;
    s.d2h_bytes = 64000ull * 100;
    GPT_EQ(verdict(&s, "100 B per item"), GP_VERDICT_D2H);
    s = base();
    s.h2d_busy_ns = 970 * MS;
    s = base();
    s.d2h_busy_ns = 900 * MS;
    GPT_EQ(verdict(&s, "argmax"), GP_VERDICT_D2H);
    s = base();
    s.callback_busy_ns = 1700 * MS; /* two workers at 85% */
    s.completion_workers = 2;
    GPT_EQ(verdict(&s, "completion workers busy 85%"), GP_VERDICT_CALLBACKS);
    s = base();
    s.prep_workers = 4;
    s.prep_busy_ns = 3600 * MS;
    s.starved_ns = 800 * MS;
    GPT_EQ(verdict(&s, "raise prep_workers (now 4)"), GP_VERDICT_PREP);

    /* Enqueue: the batcher busy launching, more host time per batch than device time. */
    s = base();
    s.enqueue_ns = 850 * MS;
    s.compute_busy_ns = 300 * MS;
    GPT_EQ(verdict(&s, "cuda_graphs=1"), GP_VERDICT_ENQUEUE);
    s.cuda_graphs = 1;
    s.graph_eager = 1000;
    snprintf(s.graph_eager_reason, sizeof s.graph_eager_reason, "capture failed");
    GPT_EQ(verdict(&s, "capture failed"), GP_VERDICT_ENQUEUE);
    /* launch_ns splits the enqueue: the compute's launch most of it -> graphs; the copies and
       events most of it -> larger batches, whatever cuda_graphs says. */
    s = base();
    s.enqueue_ns = 850 * MS;
    s.compute_busy_ns = 300 * MS;
    s.launch_ns = 700 * MS;
    GPT_EQ(verdict(&s, "cuda_graphs=1"), GP_VERDICT_ENQUEUE);
    GPT_EQ(verdict(&s, "the compute's launch"), GP_VERDICT_ENQUEUE);
    s.launch_ns = 200 * MS;
    GPT_EQ(verdict(&s, "the copies and events, not the compute's launch"), GP_VERDICT_ENQUEUE);
    s.cuda_graphs = 1;
    s.graph_eager = 1000;
    GPT_EQ(verdict(&s, "raise max_batch so each batch carries more items"), GP_VERDICT_ENQUEUE);
    /* On the host backend the enqueue is pushes to the slots' threads: no graphs, no GPU. */
    s = base();
    s.backend = GP_BACKEND_HOST;
    s.enqueue_ns = 850 * MS;
    s.compute_busy_ns = 300 * MS;
    s.inflight = 16;
    GPT_EQ(verdict(&s, "raise max_batch so each batch carries more work"), GP_VERDICT_ENQUEUE);
    GPT_EQ(verdict(&s, "the slots wait for the batcher"), GP_VERDICT_ENQUEUE);
    GPT_CHECK(!says(&s, "cuda_graphs") && !says(&s, "free cores"));
    /* ...but not when the device takes longer per batch than the launch: then it is compute. */
    s = base();
    s.enqueue_ns = 850 * MS;
    s.compute_busy_ns = 900 * MS;
    GPT_EQ(verdict(&s, NULL), GP_VERDICT_COMPUTE);

    /* Below saturation: small batches on a delay, then slots, then starvation. */
    s = base();
    s.max_delay_us = 2000;
    s.close_reasons[GP_CLOSE_SLOT_FREE] = 100;
    s.close_reasons[GP_CLOSE_DELAY] = 900;
    s.batch_items = 4000;
    s.starved_ns = 600 * MS;
    GPT_EQ(verdict(&s, "2000 us max_delay_us timer"), GP_VERDICT_SMALL_BATCHES);
    /* Preferred sizes help latency only below what the timer collects (4.0 items here); a
       longer delay is what fills batches. */
    GPT_CHECK(says(&s, "a preferred size below the 4.0 items the timer collects"));
    GPT_CHECK(!says(&s, "preferred sizes this load reaches"));
    s.batch_items = 50000; /* batches near full: the delay does its job */
    GPT_EQ(verdict(&s, "producers submit"), GP_VERDICT_PRODUCERS);
    /* The submit rate is the producers' (submitted), not the completions (a window's backlog
       draining): 400 submitted over 1 s, 50 000 completed. */
    s.submitted = 400;
    GPT_EQ(verdict(&s, "producers submit 400 items/s"), GP_VERDICT_PRODUCERS);
    s.submitted = 64000;
    /* Half the batches full, half left on the timer with 1 item each: the mean of all (32.5)
       is over half of max_batch, the timer's batches (1 item) are not: still small-batches
       ("the batches short of max_batch carrying at most half of it"). */
    s = base();
    s.max_delay_us = 2000;
    s.close_reasons[GP_CLOSE_SLOT_FREE] = 0;
    s.close_reasons[GP_CLOSE_FULL] = 500;
    s.close_reasons[GP_CLOSE_DELAY] = 500;
    s.batch_items = 500 * 64 + 500;
    s.starved_ns = 600 * MS;
    GPT_EQ(verdict(&s, "a mean of 1.0 items"), GP_VERDICT_SMALL_BATCHES);
    s = base(); /* full-ish batches on a delay at low load: the producers are the limit */
    s.max_delay_us = 1000;
    s.close_reasons[GP_CLOSE_SLOT_FREE] = 100;
    s.close_reasons[GP_CLOSE_DELAY] = 900;
    s.batch_items = 50000;
    s.starved_ns = 100 * MS;
    s.delay_wait_ns = 500 * MS;
    GPT_EQ(verdict(&s, "held a partial batch for max_delay_us 50%"), GP_VERDICT_PRODUCERS);
    s = base();
    s.inflight = 1;
    s.saturated_ns = 700 * MS;
    GPT_EQ(verdict(&s, "raise inflight (now 1) to 3 or more"), GP_VERDICT_INFLIGHT);
    s.inflight = 3; /* already 3: the turnaround, not overlap, is what more slots cover */
    GPT_EQ(verdict(&s, "spin_wait=1"), GP_VERDICT_INFLIGHT);
    s.spin_wait = 1; /* on already: not advised again */
    GPT_EQ(verdict(&s, "spin_wait is on already"), GP_VERDICT_INFLIGHT);
    GPT_CHECK(!says(&s, "spin_wait=1"));
    s.backend = GP_BACKEND_HOST; /* a slot is a thread: more of them is not the advice */
    s.inflight = 16;
    GPT_EQ(verdict(&s, "raise max_batch so each batch carries more work"), GP_VERDICT_INFLIGHT);
    GPT_CHECK(says(&s, "or inflight (now 16)") && !says(&s, "spin_wait"));
    s = base();
    s.starved_ns = 690 * MS;
    GPT_EQ(verdict(&s, "GPU is starved"), GP_VERDICT_PRODUCERS);

    /* No batch yet; and AUTO's fallback outranks everything, the bottleneck is kept. */
    s = base();
    s.batches = s.batch_items = s.completed = 0;
    GPT_EQ(verdict(&s, NULL), GP_VERDICT_NO_WORK);
    s = base();
    s.backend = GP_BACKEND_HOST;
    s.fell_back = 1;
    snprintf(s.fallback_reason, sizeof s.fallback_reason, "cudaGetDeviceCount: no device");
    s.compute_busy_ns = 990 * MS;
    gp_diagnosis d = {.struct_size = sizeof d};
    GPT_RC(gp_stats_diagnose(&s, &d), GP_OK);
    GPT_EQ(d.verdict, GP_VERDICT_GPU_NOT_USED);
    GPT_EQ(d.bottleneck, GP_VERDICT_COMPUTE);

    /* Degenerate counters never divide by zero or print nonsense. */
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    s.batches = 1;
    GPT_RC(gp_stats_diagnose(&s, &d), GP_OK);
    GPT_CHECK(d.items_per_s == 0 && d.compute == 0);

    /* The derived numbers are the counters' ratios. */
    s = base();
    s.compute_busy_ns = 950 * MS;
    GPT_RC(gp_stats_diagnose(&s, &d), GP_OK);
    GPT_CHECK(d.wall_s == 1.0 && d.items_per_s == 64000 && d.mean_batch == 64);
    GPT_CHECK(d.compute == 0.95 && d.h2d == 0.2 && d.batch_compute_us == 950);
    GPT_CHECK(d.device_items_per_s > 67368 && d.device_items_per_s < 67369); /* 64 / 950 us */
    GPT_CHECK(d.why[0] && d.knob[0]);

    /* Arguments. */
    GPT_RC(gp_stats_diagnose(NULL, &d), GP_EINVAL);
    GPT_RC(gp_stats_diagnose(&s, NULL), GP_EINVAL);
    d.struct_size = 0;
    GPT_RC(gp_stats_diagnose(&s, &d), GP_EINVAL);
    d.struct_size = sizeof d + 1;
    GPT_RC(gp_stats_diagnose(&s, &d), GP_EINVAL);
    d.struct_size = sizeof d;
    s.struct_size = 2;
    GPT_RC(gp_stats_diagnose(&s, &d), GP_EINVAL);
    s.struct_size = sizeof s + 8;
    GPT_RC(gp_stats_diagnose(&s, &d), GP_EINVAL);

    /* An older gp_diagnosis gets only what it holds; an older gp_stats reads as zeros past
       its struct_size (here: the configuration, so inflight reads 0). */
    s = base();
    s.inflight = 1;
    s.saturated_ns = 700 * MS;
    unsigned char buf[sizeof(gp_diagnosis) + 8];
    memset(buf, 0x5A, sizeof buf);
    gp_diagnosis *old = (gp_diagnosis *)buf;
    old->struct_size = offsetof(gp_diagnosis, why);
    GPT_RC(gp_stats_diagnose(&s, old), GP_OK);
    GPT_EQ(old->struct_size, offsetof(gp_diagnosis, why));
    GPT_EQ(old->verdict, GP_VERDICT_INFLIGHT);
    for (size_t i = offsetof(gp_diagnosis, why); i < sizeof buf; i++)
        GPT_EQ(buf[i], 0x5A);
    s.struct_size = offsetof(gp_stats, latency_sum_ns);
    GPT_RC(gp_stats_diagnose(&s, &d), GP_OK);
    GPT_EQ(d.verdict, GP_VERDICT_INFLIGHT);
    GPT_CHECK(strstr(d.knob, "(now 0)") != NULL);

    /* Padding: saturated compute of which a third or more was padding (the computes' own
       report) is a padding verdict; less padding, or no saturation, is not. */
    s = base();
    s.compute_busy_ns = 950 * MS;
    s.pad_useful = 600;
    s.pad_total = 1000;
    GPT_EQ(verdict(&s, "40% of the elements"), GP_VERDICT_PADDING);
    gp_diagnosis pd = {.struct_size = sizeof pd};
    GPT_RC(gp_stats_diagnose(&s, &pd), GP_OK);
    GPT_CHECK(pd.padding > 0.39 && pd.padding < 0.41);
    GPT_CHECK(strstr(pd.knob, "max_item_in_bytes") != NULL);
    s.pad_useful = 700; /* 30%: below the threshold */
    GPT_EQ(verdict(&s, NULL), GP_VERDICT_COMPUTE);
    s.pad_useful = 100;
    s.compute_busy_ns = 400 * MS; /* heavy padding but nothing saturated: not the limit */
    GPT_EQ(verdict(&s, NULL), GP_VERDICT_MIXED);

    /* Callbacks that were not results are named, with the rate of results: 23.4k of 30.6k
       timed out (deadlines) and items/s counted them. */
    s = base();
    s.compute_busy_ns = 950 * MS;
    s.completed = 30600;
    s.completed_ok = 7200;
    s.timed_out = 23400;
    GPT_EQ(verdict(&s, "76% of callbacks not results (timed out 23400, canceled 0, failed 0), "
                       "7.20k items/s OK"),
           GP_VERDICT_COMPUTE);
    s.timed_out = 1000; /* 3%: no note */
    s.completed_ok = 29600;
    GPT_CHECK(!says(&s, "not results"));
    /* Compute busy only because a starved batcher sends batches of 1: the producers are the
       limit (a delay would only add latency; measured: one producer at 300 us per item, 3.2k
       items/s at compute 97%, 6.1k with two producers). */
    s = base();
    s.compute_busy_ns = 970 * MS;
    s.starved_ns = 860 * MS;
    s.batch_items = 1000;
    GPT_EQ(verdict(&s, "compute is busy because each batch carries 1.0 items"),
           GP_VERDICT_PRODUCERS);
    GPT_CHECK(says(&s, "add producer threads") && !says(&s, "max_delay_us"));
    /* Producers while the user's own delay holds the batches: lower it (if latency matters). */
    s = base();
    s.compute_busy_ns = 100 * MS;
    s.max_delay_us = 63800;
    s.delay_wait_ns = 990 * MS;
    s.starved_ns = 5 * MS;
    GPT_EQ(verdict(&s, "lower max_delay_us (now 63800 us) if latency matters"),
           GP_VERDICT_PRODUCERS);
    /* Failures most of the callbacks: fixing them leads the knob. */
    s = base();
    s.compute_busy_ns = 950 * MS;
    s.completed_ok = 0;
    s.failed = s.completed;
    GPT_EQ(verdict(&s, "fix the failures first: 64000 of 64000 callbacks failed"),
           GP_VERDICT_COMPUTE);
    /* Few batches: a stage still running is not counted yet; said, not hidden. */
    s = base();
    s.batches = 2;
    s.batch_items = 128;
    GPT_CHECK(says(&s, "only 2 batches dispatched: judge a longer window"));
    GPT_CHECK(says(&s, "judge a longer window first: with 2 batches the busy times miss"));
    s.batches = 4;
    GPT_CHECK(!says(&s, "only 4 batches"));
    /* A batch dispatched and still running (no callback yet): no batch completed, so no-work,
       not "producers" from a batcher that idles behind it (its busy time is not counted yet). */
    s = base();
    s.batches = 1;
    s.batch_items = 1;
    s.submitted = 1;
    s.completed = s.completed_ok = 0;
    s.compute_busy_ns = s.h2d_busy_ns = s.d2h_busy_ns = s.callback_busy_ns = 0;
    s.starved_ns = 900 * MS;
    GPT_EQ(verdict(&s, "no batch completed in this snapshot or window (1 dispatched, still "
                       "running)"),
           GP_VERDICT_NO_WORK);
    /* Every clause fits whole (a clause that would not fit is left out, never cut): the
       longest combinations, with the largest numbers. Compute: one slot, small batches of a
       starved batcher, graphs to advise. */
    s = base();
    s.compute_busy_ns = 940 * MS;
    s.inflight = 1;
    s.h2d_busy_ns = 900 * MS;
    s.max_batch = 1u << 20;
    s.starved_ns = 399 * MS; /* starved, below the 40% that makes it producers */
    s.batches = 4;
    s.batch_items = 7;
    GPT_EQ(verdict(&s, "inflight=1 runs the copies in series"), GP_VERDICT_COMPUTE);
    static const char *const compute_says[] = {
        "more producers, a max_delay_us or preferred sizes fill them",
        "to go faster make the compute cheaper", "CUDA graphs for small models (cuda_graphs=1)",
        "raise max_batch if latency allows."};
    for (size_t i = 0; i < sizeof compute_says / sizeof compute_says[0]; i++)
        GPT_CHECK(says(&s, compute_says[i]));
    /* ...and the notes with the largest numbers: few batches and timeouts lead the knob (the
       rest of it follows where it fits whole). */
    s.batches = 3;
    s.timed_out = 900000000000ull;
    s.completed = s.timed_out + 64000;
    GPT_EQ(verdict(&s, "of callbacks not results"), GP_VERDICT_COMPUTE);
    GPT_CHECK(says(&s, "only 3 batches dispatched"));
    {
        gp_diagnosis dd = {.struct_size = sizeof dd};
        GPT_RC(gp_stats_diagnose(&s, &dd), GP_OK);
        GPT_CHECK(!strncmp(dd.knob, "most items time out (900000000000 of 900000064000)", 50));
        GPT_CHECK(strstr(dd.knob, "; then: judge a longer window first: with 3 batches") != NULL);
    }
    /* Producers: held for the delay, not results, few batches. */
    s.compute_busy_ns = 100 * MS;
    s.h2d_busy_ns = 100 * MS;
    s.inflight = 64;
    s.max_delay_us = 60000000;
    s.delay_wait_ns = 999 * MS;
    s.submitted = 900000000000ull;
    GPT_EQ(verdict(&s, "the GPU is starved"), GP_VERDICT_PRODUCERS);
    GPT_CHECK(says(&s, "held a partial batch for max_delay_us 100%"));
    GPT_CHECK(says(&s, "of callbacks not results"));
    GPT_CHECK(says(&s, "only 3 batches dispatched"));
    /* No batch in a window: said of the window, not of the pipeline's life. */
    s = base();
    s.batches = 0;
    s.batch_items = 0;
    GPT_EQ(verdict(&s, "no batch dispatched in this snapshot or window (its callbacks are of "
                       "batches dispatched before it)"),
           GP_VERDICT_NO_WORK);
    /* Extreme numbers: the advice is kept whole, the absurd rate keeps its unit. */
    s = base();
    s.compute_busy_ns = 940 * MS;
    s.inflight = 1;
    s.h2d_busy_ns = 900 * MS;
    s.max_batch = UINT64_MAX;
    s.starved_ns = 399 * MS;
    s.completed = s.submitted = UINT64_MAX / 2;
    GPT_EQ(verdict(&s, "to go faster make the compute cheaper"), GP_VERDICT_COMPUTE);
    GPT_CHECK(says(&s, "raise max_batch if latency allows."));
    GPT_CHECK(says(&s, "e+09G items/s"));

    /* AUTO fell back: the report's knob follows the reason (a CUDA build on a machine without
       a driver was told to build with CUDA). */
    static const char *const reasons[][2] = {
        {"this build has no CUDA backend (GP_WITH_CUDA=OFF or no toolkit at build time)",
         "knob: build with CUDA"},
        {"CUDA module libgpupipe-cuda.so not found (looked in /x)",
         "knob: install the CUDA module"},
        {"no NVIDIA driver: libcuda cannot be loaded", "knob: make the device visible"}};
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
        s = base();
        s.fell_back = 1;
        snprintf(s.fallback_reason, sizeof s.fallback_reason, "%s", reasons[i][0]);
        FILE *f = tmpfile();
        GPT_CHECK(f != NULL);
        GPT_RC(gp_stats_report(&s, f), GP_OK);
        static char text[16384];
        rewind(f);
        text[fread(text, 1, sizeof text - 1, f)] = '\0';
        fclose(f);
        GPT_CHECK(strstr(text, reasons[i][1]) != NULL);
        GPT_CHECK(i == 0 || strstr(text, "build with CUDA") == NULL);
    }

    /* Names and values are pinned: tables, CSV, JSON and Prometheus labels use them. */
    static const char *const names[GP_VERDICT_COUNT_] = {
        "no-work",   "gpu-not-used",  "producers", "prep",     "h2d",   "compute", "d2h",
        "callbacks", "small-batches", "enqueue",   "inflight", "mixed", "padding"};
    for (int v = 0; v < GP_VERDICT_COUNT_; v++)
        GPT_CHECK(strcmp(gp_verdict_name((gp_verdict)v), names[v]) == 0);
    GPT_EQ(GP_VERDICT_COMPUTE, 5);
    GPT_EQ(GP_VERDICT_MIXED, 11);
    GPT_EQ(GP_VERDICT_PADDING, 12);
    GPT_CHECK(strcmp(gp_verdict_name(GP_VERDICT_COUNT_), "unknown") == 0);
    GPT_CHECK(strcmp(gp_verdict_name((gp_verdict)-1), "unknown") == 0);
    printf("diagnose: ok\n");
    return 0;
}

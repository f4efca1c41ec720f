/*
 * The CUDA side of the tests' gate (support/gpt.c: gpt_gate_enqueue and its records), run on
 * any machine: host threads stand in for the gate kernels (support/gate_cuda.cu) and do what
 * the kernel does, store tag|1, wait for the flag with a time limit, store tag|2 or tag|3.
 * What this checks is the host's bookkeeping: two waiters held at once and released by one
 * open, entered counts from records (with host-side passes on top), records reused past
 * GPT_GATE_RECORDS launches, and that a waiter that gave up, or a gate destroyed under a
 * running waiter, fails the test (in a child process). The kernel itself needs a GPU.
 */
#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpt.h"

typedef struct sim {
    pthread_t th;
    const uint32_t *open;
    uint32_t *rec;
    uint32_t tag;
    unsigned long long timeout_ns;
} sim;

static sim sims[8];
static long sim_delay_us; /* before a waiter starts, as a kernel queued behind other work */
static int nsims;         /* written under the gate's mutex (launch is called with it held) */

static void nap_us(long us) {
    struct timespec ts = {us / 1000000, us % 1000000 * 1000L};
    nanosleep(&ts, NULL);
}

static void *sim_run(void *arg) {
    sim *s = arg;
    if (sim_delay_us) nap_us(sim_delay_us);
    __atomic_store_n(s->rec, s->tag | 1u, __ATOMIC_RELEASE);
    uint32_t code = 2;
    double t0 = gpt_now();
    while (__atomic_load_n(s->open, __ATOMIC_ACQUIRE) == 0) {
        if ((gpt_now() - t0) * 1e9 >= (double)s->timeout_ns) {
            code = 3;
            break;
        }
        nap_us(100);
    }
    __atomic_store_n(s->rec, s->tag | code, __ATOMIC_RELEASE);
    return NULL;
}

static int sim_alloc(size_t bytes, void **host, void **dev) {
    void *p = calloc(1, bytes);
    if (!p) return ENOMEM;
    *host = *dev = p;
    return 0;
}

static int sim_free(void *host) {
    free(host);
    return 0;
}

static int sim_launch(void *stream, const void *open, void *rec, uint32_t tag,
                      unsigned long long timeout_ns) {
    if (nsims == (int)(sizeof sims / sizeof sims[0])) return EAGAIN;
    sim *s = &sims[nsims];
    *s = (sim){.open = open, .rec = rec, .tag = tag, .timeout_ns = timeout_ns};
    int rc = pthread_create(&s->th, NULL, sim_run, s);
    if (rc == 0) nsims++;
    return rc;
}

static const char *sim_error_name(int err) {
    return strerror(err);
}

static void join_sims(void) {
    for (int i = 0; i < nsims; i++)
        GPT_EQ(pthread_join(sims[i].th, NULL), 0);
    nsims = 0;
}

/* Run fn in a child process; it must exit with status 1 (a failed check). */
static void expect_failure(const char *what, void (*fn)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    GPT_CHECK(pid >= 0);
    if (pid == 0) {
        fn();
        _exit(0); /* fn should not return */
    }
    int st = 0;
    GPT_EQ(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1) {
        fprintf(stderr, "%s: the child did not fail the test (status 0x%x)\n", what, st);
        exit(1);
    }
    printf("  %s: fails the test, as it should\n", what);
}

static void gave_up(void) {
    gpt_gate g;
    gpt_gate_init(&g);
    g.timeout_ns = 20000000; /* 20 ms */
    GPT_EQ(gpt_gate_enqueue(&g, NULL), 0);
    join_sims();       /* the waiter gives up */
    gpt_gate_open(&g); /* sees the record: exits 1 */
}

static void *host_pass(void *g) {
    gpt_gate_pass(g);
    return NULL;
}

static void destroyed_under_waiter(void) {
    gpt_gate g;
    gpt_gate_init(&g);
    GPT_EQ(gpt_gate_enqueue(&g, NULL), 0);
    gpt_gate_wait_entered(&g, 1);
    gpt_gate_destroy(&g); /* a waiter still runs: exits 1 */
}

int main(void) {
    gpt_gate_dev = (gpt_gate_device){sim_alloc, sim_free, sim_launch, sim_error_name};

    /* Children first, while this process has one thread. */
    expect_failure("a waiter gave up", gave_up);
    expect_failure("destroy with a waiter running", destroyed_under_waiter);

    gpt_gate g;
    gpt_gate_init(&g);

    /* Two waiters at once (two slots held), released together. */
    GPT_EQ(gpt_gate_enqueue(&g, (void *)1), 0);
    GPT_EQ(gpt_gate_enqueue(&g, (void *)2), 0);
    gpt_gate_wait_entered(&g, 2);
    nap_us(20000);
    GPT_EQ(gpt_gate_entered(&g), 2);
    pthread_mutex_lock(&g.mu);
    GPT_EQ(g.launched, 2);
    GPT_EQ(g.entered, 0); /* host-side passes: none */
    pthread_mutex_unlock(&g.mu);
    gpt_gate_open(&g);
    join_sims();
    printf("  two waiters held at once, released by one open\n");

    /* A host-side pass and a waiter count together. */
    gpt_gate_close(&g);
    pthread_t host;
    GPT_EQ(pthread_create(&host, NULL, host_pass, &g), 0);
    GPT_EQ(gpt_gate_enqueue(&g, NULL), 0);
    gpt_gate_wait_entered(&g, 4);
    gpt_gate_open(&g);
    GPT_EQ(pthread_join(host, NULL), 0);
    join_sims();
    printf("  host pass + waiter: entered counts both\n");

    /* Records are reused: three times around the ring, one waiter at a time. */
    const int laps = 3 * GPT_GATE_RECORDS + 5;
    for (int i = 0; i < laps; i++) {
        GPT_EQ(gpt_gate_enqueue(&g, NULL), 0);
        join_sims();
    }
    gpt_gate_wait_entered(&g, 4 + laps);
    pthread_mutex_lock(&g.mu);
    GPT_EQ(g.launched, 3 + laps);
    pthread_mutex_unlock(&g.mu);

    /* Closed again after the ring wrapped. The next waiter starts late: until it does, its
       record still holds the final state of the launch GPT_GATE_RECORDS before it, which must
       not count. Then it is held until opened. */
    gpt_gate_close(&g);
    sim_delay_us = 300000;
    GPT_EQ(gpt_gate_enqueue(&g, NULL), 0);
    GPT_EQ(gpt_gate_entered(&g), 4 + laps);
    gpt_gate_wait_entered(&g, 5 + laps);
    nap_us(20000);
    GPT_EQ(__atomic_load_n(&sims[0].rec[0], __ATOMIC_ACQUIRE) & 3u, 1u); /* still waiting */
    gpt_gate_open(&g);
    join_sims();
    gpt_gate_destroy(&g); /* every record final, none gave up */
    printf("gate records: %d waiters, ring of %d reused; ok\n", 4 + laps, GPT_GATE_RECORDS);
    return 0;
}

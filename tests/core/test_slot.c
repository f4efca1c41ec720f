/*
 * Per-slot state and batch-size buckets (gp_batch), on every backend:
 *  - gp_batch_set_slot_user: from compute_setup only (GP_EINVAL from the compute, for NULL);
 *    every batch of a slot and its compute_teardown carry the pointer its setup stored;
 *  - buckets: the one rule (preferred sizes, else powers of two below max_batch; max_batch
 *    last), the same list in setup and in every batch; each batch's bucket is the smallest that
 *    holds it (n <= bucket, and the bucket below is < n).
 */
#include <stdatomic.h>
#include <string.h>

#include "gpt.h"

#define WORDS 1
#define MAXSLOTS 4

typedef struct slotinfo {
    int slot;
    int magic;
} slotinfo;

static struct {
    slotinfo info[MAXSLOTS];
    _Atomic int setups, teardowns, batches, bad, einval_in_compute;
    size_t want_buckets[GP_MAX_BUCKETS];
    int want_n;
} S;

static int check_buckets(const gp_batch *b) {
    if (b->num_buckets != S.want_n) return 0;
    for (int i = 0; i < b->num_buckets; i++)
        if (b->buckets[i] != S.want_buckets[i]) return 0;
    return b->buckets[b->num_buckets - 1] == b->capacity;
}

static int setup(void *user, const gp_batch *b) {
    GPT_CHECK(b->slot >= 0 && b->slot < MAXSLOTS);
    GPT_CHECK(b->slot_user == NULL && b->bucket == 0);
    GPT_CHECK(check_buckets(b));
    GPT_RC(gp_batch_set_slot_user(NULL, &S.info[b->slot]), GP_EINVAL);
    S.info[b->slot].slot = b->slot;
    S.info[b->slot].magic = 0x5107;
    GPT_RC(gp_batch_set_slot_user(b, &S.info[b->slot]), GP_OK);
    GPT_CHECK(b->slot_user == &S.info[b->slot]); /* visible at once, in the template */
    atomic_fetch_add(&S.setups, 1);
    return GP_OK;
}

static void teardown(void *user, const gp_batch *b) {
    const slotinfo *si = b->slot_user;
    if (!si || si->slot != b->slot || si->magic != 0x5107) atomic_fetch_add(&S.bad, 1);
    atomic_fetch_add(&S.teardowns, 1);
}

static int compute(void *user, const gp_batch *b) {
    const slotinfo *si = b->slot_user;
    if (!si || si->slot != b->slot || si->magic != 0x5107) atomic_fetch_add(&S.bad, 1);
    if (!check_buckets(b)) atomic_fetch_add(&S.bad, 1);
    /* The smallest bucket that holds n. */
    int i = 0;
    while (b->buckets[i] != b->bucket)
        i++;
    if (b->bucket < b->n || (i > 0 && b->buckets[i - 1] >= b->n)) atomic_fetch_add(&S.bad, 1);
    if (gp_batch_set_slot_user(b, NULL) == GP_EINVAL) atomic_fetch_add(&S.einval_in_compute, 1);
    atomic_fetch_add(&S.batches, 1);
    return gpt_transform(user, b);
}

static _Atomic int done_ok;
static void done(void *user, int status, const void *out, size_t bytes) {
    if (status == GP_OK && ((const uint32_t *)out)[0] == gpt_word((uint32_t)(uintptr_t)user))
        atomic_fetch_add(&done_ok, 1);
}

static void run(gp_backend be, const size_t *preferred, int npref, size_t max_batch,
                const size_t *want, int nwant) {
    memset(&S, 0, sizeof S);
    memcpy(S.want_buckets, want, (size_t)nwant * sizeof *want);
    S.want_n = nwant;
    atomic_store(&done_ok, 0);
    gp_config c;
    gpt_config(&c, be);
    c.item_in_bytes = c.item_out_bytes = WORDS * 4;
    c.max_batch = max_batch;
    c.inflight = 3;
    c.max_delay_us = 200; /* batches of many sizes */
    for (int i = 0; i < npref; i++)
        c.preferred[i] = preferred[i];
    c.num_preferred = npref;
    c.compute = compute;
    c.compute_setup = setup;
    c.compute_teardown = teardown;
    gp_pipeline *p = gpt_create(&c);
    GPT_EQ(atomic_load(&S.setups), 3);
    int n = 2000;
    for (int i = 0; i < n; i++) {
        uint32_t w = (uint32_t)i;
        GPT_RC(gp_pipeline_submit(p, &w, sizeof w, done, (void *)(uintptr_t)i), GP_OK);
        if (i % 97 == 0) GPT_RC(gp_pipeline_flush(p), GP_OK); /* small batches too */
    }
    GPT_RC(gp_pipeline_drain(p, -1), GP_OK);
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    GPT_EQ(atomic_load(&done_ok), n);
    GPT_EQ(atomic_load(&S.teardowns), 3);
    GPT_EQ(atomic_load(&S.bad), 0);
    GPT_CHECK(atomic_load(&S.batches) > 0);
    GPT_EQ(atomic_load(&S.einval_in_compute), atomic_load(&S.batches));
}

/* gp_batch_set_error: a failing compute's and a failing setup's own reason reach the
   pipeline's errors; a batch that is not a pipeline's is refused. */
static int failing_compute(void *user, const gp_batch *b) {
    GPT_RC(gp_batch_set_error(b, "the model rejected item %llu", (unsigned long long)b->first_seq),
           GP_OK);
    return GP_ECOMPUTE;
}

static int failing_setup(void *user, const gp_batch *b) {
    GPT_RC(gp_batch_set_error(b, "no weights for slot %d", b->slot), GP_OK);
    return GP_ENOMEM;
}

static void errors(gp_backend be) {
    gp_batch fake;
    memset(&fake, 0, sizeof fake);
    GPT_RC(gp_batch_set_error(&fake, "x"), GP_EINVAL);
    GPT_RC(gp_batch_set_error(NULL, "x"), GP_EINVAL);
    GPT_RC(gp_batch_set_slot_user(&fake, &fake), GP_EINVAL);
    gp_config c;
    gpt_config(&c, be);
    c.item_in_bytes = c.item_out_bytes = 4;
    c.compute = failing_compute;
    gp_pipeline *p = gpt_create(&c);
    uint32_t w = 1;
    GPT_RC(gp_pipeline_infer(p, &w, 4, &w, 4), GP_ECOMPUTE);
    char err[512];
    GPT_RC(gp_pipeline_last_error(p, err, sizeof err), GP_ECOMPUTE);
    GPT_CHECK(strstr(err, "compute returned") && strstr(err, ": the model rejected item 0"));
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    c.compute = gpt_transform;
    c.compute_setup = failing_setup;
    GPT_RC(gp_pipeline_create(&c, &p, err, sizeof err), GP_ENOMEM);
    GPT_CHECK(strstr(err, "compute_setup failed for slot 0: no weights for slot 0") != NULL);
}

int main(int argc, char **argv) {
    gp_backend be = gpt_backend(argc, argv);
    errors(be);
    const size_t pow2[] = {1, 2, 4, 8, 16, 32, 64};
    run(be, NULL, 0, 64, pow2, 7);
    const size_t pow2_odd[] = {1, 2, 4, 8, 16, 32, 48};
    run(be, NULL, 0, 48, pow2_odd, 7);
    const size_t pref[] = {8, 32}, pref_want[] = {8, 32, 64};
    run(be, pref, 2, 64, pref_want, 3);
    const size_t pref_top[] = {4, 16}, pref_top_want[] = {4, 16};
    run(be, pref_top, 2, 16, pref_top_want, 2);
    const size_t one[] = {1};
    run(be, NULL, 0, 1, one, 1);
    printf("slot_user and buckets: ok\n");
    return 0;
}

/*
 * The model runtime on one backend: the table a backend's model layers implement
 * (docs/DESIGN.md §6). The backend table (lib/backend.h) points at one per backend: host in
 * lib/model/host.c, cuda in lib/cuda/model.c. model.c's compute functions dispatch through it
 * and keep the slot's state in the batch (gp_batch.slot_user), so a batch finds its state with
 * no lookup and no lock.
 *
 * Errors: every entry records the detail in the model's error sink (m->err, read by
 * gp_model_last_error) and returns a GP_E* code.
 * Threading: setup and teardown run on the thread creating / destroying the pipeline, for one
 * slot at a time, with the slot's device current; run runs where the backend runs computes
 * (host: the slot's stream thread; CUDA: the batcher thread, enqueue only), for different
 * slots (and different pipelines sharing the model) concurrently. Model-wide state that setup
 * creates lives in m->shared[backend id] and is created and read under m->mu.
 */
#ifndef GP_LIB_MODEL_EXEC_H
#define GP_LIB_MODEL_EXEC_H

#include "gpupipe/gpupipe.h"

typedef struct gp_model gp__model;

typedef struct gp__model_exec {
    /* Prepare slot `slot` (b->n == 0; b->capacity items; b->buckets): everything later batches
       need, allocated now. *state receives the slot's state. */
    int (*setup)(gp__model *m, const gp_batch *slot, void **state);
    /* Run (host) or enqueue (CUDA) the op list on batch `b`. GP_OK or the failure's code. */
    int (*run)(gp__model *m, void *state, const gp_batch *b);
    /* (optional) Once the batch's device work is done (its output copied back), on the
       pipeline's completion poller, before its callbacks: GP_OK (items it failed alone with
       gp_batch_fail_item included), or the failure's code (the batch's items then fail with
       GP_ECOMPUTE). What run could only enqueue a test for (CUDA: a token id outside the
       vocabulary, found by the embedding kernel). */
    int (*check)(gp__model *m, void *state, const gp_batch *b);
    /* Free what setup made for the slot; state may be NULL. */
    void (*teardown)(gp__model *m, void *state, const gp_batch *slot);
    /* (optional) Free the model-wide state in `shared` (from gp_model_free, after every
       pipeline using the model was destroyed). */
    void (*model_free)(gp__model *m, void *shared);
} gp__model_exec;

extern const gp__model_exec gp__model_host_exec; /* lib/model/host.c */

/*
 * From compute_setup only (the model glue's, model.c): `check` runs for each of the slot's
 * batches once the batch's device work is done, on the completion poller, before the batch's
 * callbacks, with `user` (not compute_user: a caller may wrap the model's compute) and the batch
 * as the compute saw it; a nonzero return fails the batch's items with GP_ECOMPUTE, with
 * gp_batch_set_error's message (lib/batch.c, lib/completion.c). GP_OK; GP_EINVAL outside
 * compute_setup or for a batch not a pipeline's.
 */
int gp__batch_set_check(const gp_batch *b, int (*check)(void *user, const gp_batch *b), void *user);

#endif

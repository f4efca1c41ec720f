/*
 * Per-op time (options.profile; include/gpupipe/model.h, docs/DESIGN.md §6): the counters
 * (profile.h) made at load, read, reset and printed here under their mutex. The backends add
 * to them once a batch is done (common.c: host.c after the op list ran on the slot's thread;
 * lib/cuda/model.c's check, from events on the slot's stream).
 */
#include <stdlib.h>
#include <string.h>

#include "model_impl.h"
#include "profile.h"

int gp__prof_init(gp__model *m) {
    size_t n = m->n_ops > 0 ? (size_t)m->n_ops : 0;
    struct gp__prof *p = calloc(1, sizeof *p + n * sizeof p->ns[0]);
    if (!p) return GP_ENOMEM;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return GP_ENOMEM;
    }
    p->n = (int)n;
    m->prof = p;
    return GP_OK;
}

void gp__prof_free(gp__model *m) {
    if (!m->prof) return;
    pthread_mutex_destroy(&m->prof->mu);
    free(m->prof);
    m->prof = NULL;
}

int gp_model_op_count(const gp_model *m) {
    return m ? m->n_ops : 0;
}

int gp_model_op_time(const gp_model *m, int op, uint64_t *ns, uint64_t *batches, uint64_t *items) {
    if (ns) *ns = 0;
    if (batches) *batches = 0;
    if (items) *items = 0;
    if (!m || op < 0 || op >= m->n_ops) return GP_EINVAL;
    struct gp__prof *p = m->prof;
    if (!p) return GP_ENOTSUP;
    pthread_mutex_lock(&p->mu);
    if (ns) *ns = p->ns[op];
    if (batches) *batches = p->batches;
    if (items) *items = p->items;
    pthread_mutex_unlock(&p->mu);
    return GP_OK;
}

int gp_model_profile_reset(gp_model *m) {
    if (!m) return GP_EINVAL;
    struct gp__prof *p = m->prof;
    if (!p) return GP_ENOTSUP;
    pthread_mutex_lock(&p->mu);
    memset(p->ns, 0, (size_t)p->n * sizeof p->ns[0]);
    p->batches = p->items = p->untimed = 0;
    pthread_mutex_unlock(&p->mu);
    return GP_OK;
}

/* The op's kind with what it carries (model_impl.h): a folded residual add, a fused
   activation ("conv2d+add+relu"); an activation op names its function ("act:gelu"). Returns
   its length. */
static int op_kind(const gp__op *op, char kind[40]) {
    return snprintf(kind, 40, "%s%s%s%s", gp__op_name(op->kind),
                    op->kind == GP__OP_CONV2D && gp__op_has_src2(op) ? "+add" : "",
                    op->act ? (op->kind == GP__OP_ACT ? ":" : "+") : "",
                    op->act ? gp__act_name(op->act) : "");
}

int gp_model_profile(const gp_model *m, FILE *f) {
    if (!m || !f) return GP_EINVAL;
    struct gp__prof *p = m->prof;
    if (!p) return GP_ENOTSUP;
    int n = p->n;
    /* One snapshot, so the sum and the shares agree with the rows. */
    uint64_t *v = calloc((size_t)n + 1, sizeof *v);
    if (!v) return GP_ENOMEM;
    pthread_mutex_lock(&p->mu);
    memcpy(v, p->ns, (size_t)n * sizeof *v);
    uint64_t batches = p->batches, items = p->items, untimed = p->untimed;
    pthread_mutex_unlock(&p->mu);
    uint64_t sum_ns = 0;
    for (int i = 0; i < n; i++)
        sum_ns += v[i];
    double per_batch = batches ? 1e-6 / (double)batches : 0; /* ns -> ms per batch */
    double per_item = items ? 1e-3 / (double)items : 0;      /* ns -> us per item */
    int w = 20, kw = 16; /* the name column, as gp_model_describe's; the kind column */
    char kind[40];
    for (int i = 0; i < n; i++) {
        int l = (int)strlen(m->ops[i].name);
        if (l > w) w = l;
        l = op_kind(&m->ops[i], kind);
        if (l > kw) kw = l;
    }
    int bad = fprintf(f,
                      "per-op time: %llu batches timed (%llu items, %.1f per batch), %llu not "
                      "timed%s\n",
                      (unsigned long long)batches, (unsigned long long)items,
                      batches ? (double)items / (double)batches : 0.0, (unsigned long long)untimed,
                      untimed ? " (CUDA graph replays, unreadable events)" : "") < 0;
    bad |= fprintf(f, "%3s  %-8s %-*s %-*s %-14s %10s %10s %7s %10s\n", "op", "spec", kw, "kind", w,
                   "name", "output", "ms/batch", "us/item", "share", "GFLOP/s") < 0;
    for (int i = 0; i < n; i++) {
        const gp__op *op = &m->ops[i];
        char so[32], line[16];
        op_kind(op, kind);
        gp__shape_str(op->out, so, sizeof so);
        snprintf(line, sizeof line, "line %d", op->line);
        /* The op's arithmetic rate: its flops per item (fixed-size models; a token model's
           are per token, its items' lengths unknown here) over its time. */
        char rate[24] = "-";
        if (!m->token_bytes && v[i] && op->flops > 0)
            snprintf(rate, sizeof rate, "%.1f", op->flops * (double)items / (double)v[i]);
        if (!batches)
            bad |= fprintf(f, "%3d  %-8s %-*s %-*s %-14s %10s %10s %7s %10s\n", i, line, kw, kind,
                           w, op->name[0] ? op->name : "-", so, "-", "-", "-", "-") < 0;
        else
            bad |= fprintf(f, "%3d  %-8s %-*s %-*s %-14s %10.3f %10.3f %6.1f%% %10s\n", i, line, kw,
                           kind, w, op->name[0] ? op->name : "-", so, (double)v[i] * per_batch,
                           (double)v[i] * per_item,
                           sum_ns ? 100.0 * (double)v[i] / (double)sum_ns : 0.0, rate) < 0;
    }
    /* The sum per batch: "-" until a batch was timed. */
    if (batches)
        bad |= fprintf(f, "%3s  %-8s %-*s %-*s %-14s %10.3f %10.3f %6.1f%%\n", "", "sum", kw, "", w,
                       "", "", (double)sum_ns * per_batch, (double)sum_ns * per_item, 100.0) < 0;
    else
        bad |= fprintf(f, "%3s  %-8s %-*s %-*s %-14s %10s %10s %7s\n", "", "sum", kw, "", w, "", "",
                       "-", "-", "-") < 0;
    free(v);
    bad |= fflush(f) != 0 || ferror(f);
    return bad ? GP_EIO : GP_OK;
}

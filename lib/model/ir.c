/* The IR's lifetime (model_impl.h): new, allocations owned by the model, options, destroy. */
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "model_impl.h"

gp__model *gp__model_new(void) {
    gp__model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    if (pthread_mutex_init(&m->mu, NULL) != 0) {
        free(m);
        return NULL;
    }
    if (gp__errsink_init(&m->err, NULL, NULL) != GP_OK) {
        pthread_mutex_destroy(&m->mu);
        free(m);
        return NULL;
    }
    return m;
}

void gp__model_destroy(gp__model *m) {
    if (!m) return;
    for (int id = 0; id < GP__MODEL_BACKENDS; id++)
        if (m->shared[id] && m->exec[id] && m->exec[id]->model_free)
            m->exec[id]->model_free(m, m->shared[id]);
    for (int i = 0; i < m->n_allocs; i++)
        free(m->allocs[i]);
    free(m->allocs);
    free(m->ops);
    free(m->bufs);
    free(m->spec);
    gp__prof_free(m);
    gp__errsink_fini(&m->err);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

float *gp__model_alloc(gp__model *m, size_t n) {
    if (m->n_allocs == m->cap_allocs) {
        int cap = m->cap_allocs ? m->cap_allocs * 2 : 32;
        float **na = realloc(m->allocs, (size_t)cap * sizeof *na);
        if (!na) return NULL;
        m->allocs = na;
        m->cap_allocs = cap;
    }
    void *p = NULL;
    if (n > SIZE_MAX / sizeof(float) - 64 ||
        posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) != 0)
        return NULL;
    m->allocs[m->n_allocs++] = p;
    return p;
}

void gp_model_options_init(gp_model_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->precision = GP_PRECISION_FP32;
    o->seed = 0x67707570u;
    o->max_tokens = 512;
}

int gp__model_options_copy(gp_model_options *dst, const gp_model_options *src, gp__err *e) {
    gp_model_options_init(dst);
    if (!src) return GP_OK;
    /* Larger than this library's struct: a caller built against a newer header, whose new
       fields would be ignored without a word (gp_config does the same, pipeline.c). */
    if (src->struct_size < offsetof(gp_model_options, precision) || src->struct_size > sizeof *dst)
        return gp__errf(e, GP_EINVAL,
                        "options.struct_size is %zu, not a gp_model_options size of this "
                        "library (%zu at most): fill options with gp_model_options_init()",
                        src->struct_size, sizeof *dst);
    memcpy(dst, src, src->struct_size);
    dst->struct_size = sizeof *dst;
    if ((unsigned)dst->precision > GP_PRECISION_BF16)
        return gp__errf(e, GP_EINVAL, "options.precision %d is not a gp_precision",
                        (int)dst->precision);
    if (dst->max_batch > (1u << 20))
        return gp__errf(e, GP_EINVAL, "options.max_batch %zu is too large", dst->max_batch);
    if (dst->profile != 0 && dst->profile != 1)
        return gp__errf(e, GP_EINVAL, "options.profile %d is not 0 or 1", dst->profile);
    if (dst->max_tokens == 0 || dst->max_tokens > (1u << 24))
        return gp__errf(e, GP_EINVAL, "options.max_tokens %zu not in 1..2^24", dst->max_tokens);
    /* max_batch_tokens is checked against the model's own token limit once it is built
       (load_image, model.c): a shorter position table lowers the limit. */
    return GP_OK;
}

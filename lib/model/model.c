/* The public model API: load (mmap + strict parse + build), queries, pipeline glue. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build.h"
#include "host.h"
#include "model_impl.h"
#include "safetensors.h"

#define GP__SPEC_FILE_MAX (1u << 20)

void gp_model_options_init(gp_model_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->precision = GP_PRECISION_FP32;
    o->seed = 0x67707570u;
}

/* Copy the caller's options (only what its struct_size covers) over defaults. */
int gp__model_options_copy(gp_model_options *dst, const gp_model_options *src, gp__err *e) {
    gp_model_options_init(dst);
    if (!src) return GP_OK;
    if (src->struct_size < offsetof(gp_model_options, precision))
        return gp__errf(e, GP_EINVAL,
                        "options.struct_size is %zu: fill options with gp_model_options_init()",
                        src->struct_size);
    size_t n = src->struct_size < sizeof *dst ? src->struct_size : sizeof *dst;
    memcpy(dst, src, n);
    dst->struct_size = sizeof *dst;
    if ((unsigned)dst->precision > GP_PRECISION_BF16)
        return gp__errf(e, GP_EINVAL, "options.precision %d is not a gp_precision",
                        (int)dst->precision);
    if (dst->max_batch > (1u << 20))
        return gp__errf(e, GP_EINVAL, "options.max_batch %zu is too large", dst->max_batch);
    return GP_OK;
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

static gp__model *model_new(void) {
    gp__model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    if (pthread_mutex_init(&m->mu, NULL) != 0) {
        free(m);
        return NULL;
    }
    return m;
}

void gp_model_free(gp_model *m) {
    if (!m) return;
#ifdef GP_HAVE_CUDA
    gp__model_cuda_free(m);
#endif
    while (m->slots) { /* only when pipelines were not destroyed first: best effort */
        gp__mslot *s = m->slots;
        m->slots = s->next;
        free(s->scratch);
        free(s);
    }
    for (int i = 0; i < m->n_allocs; i++)
        free(m->allocs[i]);
    free(m->allocs);
    free(m->ops);
    free(m->bufs);
    free(m->spec);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static int read_text_file(const char *path, char **out, gp__err *e) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return gp__errf(e, GP_EIO, "cannot open spec file '%s': %s", path, strerror(errno));
    char *buf = malloc(GP__SPEC_FILE_MAX + 1);
    if (!buf) {
        fclose(f);
        return gp__errf(e, GP_ENOMEM, "out of memory");
    }
    size_t n = fread(buf, 1, GP__SPEC_FILE_MAX + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return gp__errf(e, GP_EIO, "cannot read spec file '%s'", path);
    }
    if (n > GP__SPEC_FILE_MAX) {
        free(buf);
        return gp__errf(e, GP_EMODEL, "spec file '%s' is larger than %u bytes", path,
                        GP__SPEC_FILE_MAX);
    }
    if (memchr(buf, '\0', n)) {
        free(buf);
        return gp__errf(e, GP_EMODEL, "spec file '%s' contains a NUL byte", path);
    }
    buf[n] = '\0';
    *out = buf;
    return GP_OK;
}

/* "dir/net.safetensors" -> "dir/net.spec"; other names get ".spec" appended. */
static char *beside_spec_path(const char *path) {
    size_t n = strlen(path);
    const char *ext = ".safetensors";
    size_t el = strlen(ext);
    size_t base = n >= el && strcmp(path + n - el, ext) == 0 ? n - el : n;
    char *p = malloc(base + 6);
    if (!p) return NULL;
    memcpy(p, path, base);
    memcpy(p + base, ".spec", 6);
    return p;
}

/* Parse the image, pick the spec, build the IR and the host packing. */
static int load_image(const void *img, size_t len, const gp_model_options *opt,
                      const char *model_path, gp_model **out, gp__err *e) {
    gp__st st;
    int rc = gp__st_parse(img, len, &st, e);
    if (rc != GP_OK) return rc;
    char *spec = NULL;
    if (opt->spec_text) {
        spec = strdup(opt->spec_text);
        rc = spec ? GP_OK : gp__errf(e, GP_ENOMEM, "out of memory");
    } else if (opt->spec_path) {
        rc = read_text_file(opt->spec_path, &spec, e);
    } else if (st.spec) {
        spec = strdup(st.spec);
        rc = spec ? GP_OK : gp__errf(e, GP_ENOMEM, "out of memory");
    } else if (model_path) {
        char *sp = beside_spec_path(model_path);
        if (!sp) {
            rc = gp__errf(e, GP_ENOMEM, "out of memory");
        } else if (access(sp, F_OK) != 0) {
            rc = gp__errf(e, GP_EMODEL,
                          "no spec: none given in the options, no __metadata__ key '%s', and no "
                          "file '%s'",
                          GP__ST_SPEC_KEY, sp);
        } else {
            rc = read_text_file(sp, &spec, e);
        }
        free(sp);
    } else {
        rc = gp__errf(e, GP_EMODEL,
                      "no spec: none given in the options and no __metadata__ key '%s'",
                      GP__ST_SPEC_KEY);
    }
    if (rc != GP_OK) {
        gp__st_free(&st);
        return rc;
    }
    gp__model *m = model_new();
    if (!m) {
        free(spec);
        gp__st_free(&st);
        return gp__errf(e, GP_ENOMEM, "out of memory");
    }
    m->spec = spec;
    m->precision = opt->precision;
    m->max_batch = opt->max_batch;
    rc = gp__model_build(m, spec, &st, e);
    gp__st_free(&st);
    if (rc == GP_OK) rc = gp__host_prepare(m, e);
    if (rc != GP_OK) {
        gp_model_free(m);
        return rc;
    }
    *out = m;
    return GP_OK;
}

int gp_model_load_memory(const void *data, size_t bytes, const gp_model_options *opt,
                         gp_model **out, char *err, size_t err_len) {
    gp__err e = {err, err_len};
    if (err && err_len) err[0] = '\0';
    if (!out) return gp__errf(&e, GP_EINVAL, "out is NULL");
    *out = NULL;
    if (!data && bytes) return gp__errf(&e, GP_EINVAL, "data is NULL");
    gp_model_options o;
    int rc = gp__model_options_copy(&o, opt, &e);
    if (rc != GP_OK) return rc;
    return load_image(data, bytes, &o, NULL, out, &e);
}

int gp_model_load(const char *path, const gp_model_options *opt, gp_model **out, char *err,
                  size_t err_len) {
    gp__err e = {err, err_len};
    if (err && err_len) err[0] = '\0';
    if (!out) return gp__errf(&e, GP_EINVAL, "out is NULL");
    *out = NULL;
    if (!path) return gp__errf(&e, GP_EINVAL, "path is NULL");
    gp_model_options o;
    int rc = gp__model_options_copy(&o, opt, &e);
    if (rc != GP_OK) return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return gp__errf(&e, GP_EIO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        rc = gp__errf(&e, GP_EIO, "cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return gp__errf(&e, GP_EIO, "'%s' is not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    if (len < 8) {
        close(fd);
        return gp__errf(&e, GP_EMODEL, "file too short for a safetensors header (%zu bytes)", len);
    }
    void *img = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (img == MAP_FAILED)
        return gp__errf(&e, GP_EIO, "cannot map '%s': %s", path, strerror(errno));
    rc = load_image(img, len, &o, path, out, &e);
    munmap(img, len);
    return rc;
}

/* ---- queries ----------------------------------------------------------------------------- */

int gp_model_input_info(const gp_model *m, gp_tensor_info *info) {
    if (!m || !info) return GP_EINVAL;
    *info = m->in_info;
    return GP_OK;
}

int gp_model_output_info(const gp_model *m, gp_tensor_info *info) {
    if (!m || !info) return GP_EINVAL;
    *info = m->out_info;
    return GP_OK;
}

size_t gp_model_input_bytes(const gp_model *m) {
    return m ? m->in_info.bytes : 0;
}

size_t gp_model_output_bytes(const gp_model *m) {
    return m ? m->out_info.bytes : 0;
}

double gp_model_flops(const gp_model *m) {
    return m ? m->flops : 0.0;
}

const char *gp_model_spec(const gp_model *m) {
    return m ? m->spec : NULL;
}

static const char *buf_name(int id, char *tmp, size_t len) {
    if (id == GP__BUF_INPUT) return "in";
    if (id == GP__BUF_OUTPUT) return "out";
    snprintf(tmp, len, "b%d", id);
    return tmp;
}

static void info_str(const gp_tensor_info *t, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "%s ", gp_dtype_name(t->dtype));
    for (int d = 0; d < t->rank && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? "x" : "", (long long)t->dims[d]);
}

/* "mean 0.485,0.456,0.406" or "mean 0.5" when every channel has the same value. */
static int print_values(FILE *f, const char *what, const float *v, int n) {
    int same = 1;
    for (int i = 1; i < n; i++)
        same &= v[i] == v[0];
    int bad = fprintf(f, ", %s ", what) < 0;
    for (int i = 0; i < (same ? 1 : n); i++)
        bad |= fprintf(f, "%s%g", i ? "," : "", (double)v[i]) < 0;
    return bad;
}

/* The input line: what a caller submits per item and what the first op makes of it. */
static int describe_input(const gp__model *m, FILE *f) {
    char in[64];
    info_str(&m->in_info, in, sizeof in);
    const gp__op *prep = m->n_ops && m->ops[0].kind == GP__OP_PREP ? &m->ops[0] : NULL;
    int bad = fprintf(f, "input:  %s per item (%zu bytes), layout %s", in, m->in_info.bytes,
                      prep && prep->hwc      ? "hwc"
                      : m->in_info.rank == 3 ? "chw"
                                             : "features") < 0;
    if (!prep) return bad | (fprintf(f, ", no normalization\n") < 0);
    bad |= fprintf(f, "; on the device: %s", prep->in_dtype == GP_DTYPE_U8 ? "x / 255" : "x") < 0;
    bad |= print_values(f, "mean", prep->mean, prep->out.c);
    bad |= print_values(f, "std", prep->std, prep->out.c);
    bad |= fprintf(f, ", to f32 %dx%dx%d\n", prep->out.c, prep->out.h, prep->out.w) < 0;
    return bad;
}

static int describe_output(const gp__model *m, FILE *f) {
    char out[64];
    info_str(&m->out_info, out, sizeof out);
    gp__op_kind last = m->n_ops ? m->ops[m->n_ops - 1].kind : GP__OP_COPY;
    const char *what = last == GP__OP_TOPK      ? "class indices, best first"
                       : last == GP__OP_ARGMAX  ? "the class index"
                       : last == GP__OP_SOFTMAX ? "probabilities"
                                                : "values";
    return fprintf(f, "output: %s per item (%zu bytes): %s\n", out, m->out_info.bytes, what) < 0;
}

int gp_model_describe(const gp_model *m, FILE *f) {
    if (!m || !f) return GP_EINVAL;
    int bad = describe_input(m, f);
    for (int i = 0; i < m->n_ops; i++) {
        const gp__op *op = &m->ops[i];
        char si[32], so[32], ss[8], sd[8], s2[8];
        gp__shape sh[2] = {op->in, op->out};
        char *dst[2] = {si, so};
        for (int k = 0; k < 2; k++) {
            if (sh[k].rank == 1)
                snprintf(dst[k], 32, "%d", sh[k].c);
            else
                snprintf(dst[k], 32, "%dx%dx%d", sh[k].c, sh[k].h, sh[k].w);
        }
        bad |=
            fprintf(f, "%3d  line %-3d %-13s %-20s %12s -> %-12s %-7s %s%s%s -> %s  %.3g MFLOP\n",
                    i, op->line, gp__op_name(op->kind), op->name, si, so,
                    op->act ? gp__act_name(op->act) : "", buf_name(op->src, ss, sizeof ss),
                    op->kind == GP__OP_ADD ? " + " : "",
                    op->kind == GP__OP_ADD ? buf_name(op->src2, s2, sizeof s2) : "",
                    buf_name(op->dst, sd, sizeof sd), op->flops * 1e-6) < 0;
    }
    bad |= describe_output(m, f);
    bad |= fprintf(f, "buffers: %d, scratch %zu floats per item; %.4g MFLOP per item\n", m->n_bufs,
                   m->scratch_elems, m->flops * 1e-6) < 0;
    return bad ? GP_EIO : GP_OK;
}

int gp_model_last_error(gp_model *m, char *buf, size_t len) {
    if (!m) return GP_EINVAL;
    pthread_mutex_lock(&m->mu);
    int code = m->last_code;
    if (buf && len) snprintf(buf, len, "%s", m->last_err);
    pthread_mutex_unlock(&m->mu);
    return code;
}

static void set_last_error(gp__model *m, int code, const char *msg) {
    pthread_mutex_lock(&m->mu);
    m->last_code = code;
    snprintf(m->last_err, sizeof m->last_err, "%s", msg);
    pthread_mutex_unlock(&m->mu);
}

/* ---- pipeline glue ----------------------------------------------------------------------- */

static gp__mslot *find_slot(gp__model *m, const void *key) {
    pthread_mutex_lock(&m->mu);
    gp__mslot *s = m->slots;
    while (s && s->key != key)
        s = s->next;
    pthread_mutex_unlock(&m->mu);
    return s;
}

/* The host runs a batch through the whole op list a chunk of items at a time, the chunk's
   scratch kept within this budget: whole batches for small models, a few items at a time for
   large images, so a host slot's memory does not grow with max_batch. Results do not depend
   on the chunking (each item's arithmetic is the same). */
#define GP__HOST_SCRATCH_BUDGET ((size_t)32 << 20)

static size_t host_chunk(const gp__model *m, size_t want) {
    size_t per = m->scratch_elems * sizeof(float);
    size_t c = per ? GP__HOST_SCRATCH_BUDGET / per : want;
    if (c < 1) c = 1;
    return c < want ? c : want;
}

static int host_run_chunked(const gp__model *m, size_t n, const void *in, void *out,
                            const gp__mslot *s) {
    int rc = GP_OK;
    for (size_t i = 0; i < n && rc == GP_OK; i += s->capacity) {
        size_t k = n - i < s->capacity ? n - i : s->capacity;
        rc = gp__host_run(m, k, (const char *)in + i * m->in_info.bytes,
                          (char *)out + i * m->out_info.bytes, s->scratch, s->capacity, s->work);
    }
    return rc;
}

static int host_slot_alloc(const gp__model *m, gp__mslot *s, size_t capacity) {
    size_t scr, total;
    if (!gp__mul_ok(capacity, m->scratch_elems, &scr) ||
        !gp__add_ok(scr, m->host_work_elems + 64, &total) || total > SIZE_MAX / sizeof(float))
        return GP_ENOMEM;
    void *p = NULL;
    if (posix_memalign(&p, 64, total * sizeof(float)) != 0) return GP_ENOMEM;
    s->scratch = p;
    s->work = s->scratch + (scr + 63) / 64 * 64;
    s->capacity = capacity;
    return GP_OK;
}

static int model_setup(void *user, const gp_batch *b) {
    gp__model *m = user;
    char msg[256] = "";
    gp__mslot *s = calloc(1, sizeof *s);
    if (!s) {
        set_last_error(m, GP_ENOMEM, "out of memory");
        return GP_ENOMEM;
    }
    s->key = b->in;
    s->backend = b->backend;
    s->capacity = b->capacity;
    int rc = GP_ENOTSUP;
    if (b->backend == GP_BACKEND_HOST) {
        rc = host_slot_alloc(m, s, host_chunk(m, b->capacity));
        if (rc != GP_OK)
            snprintf(msg, sizeof msg, "out of memory for the host scratch of %zu items",
                     b->capacity);
    } else if (b->backend == GP_BACKEND_CUDA) {
#ifdef GP_HAVE_CUDA
        rc = gp__model_cuda_setup(m, b, &s->cuda, msg, sizeof msg);
#else
        snprintf(msg, sizeof msg, "this build has no CUDA layers");
#endif
    } else {
        snprintf(msg, sizeof msg, "unknown backend %d", (int)b->backend);
    }
    if (rc != GP_OK) {
        set_last_error(m, rc, msg);
        free(s->scratch);
        free(s);
        return rc;
    }
    pthread_mutex_lock(&m->mu);
    s->next = m->slots;
    m->slots = s;
    pthread_mutex_unlock(&m->mu);
    return GP_OK;
}

static void model_teardown(void *user, const gp_batch *b) {
    gp__model *m = user;
    pthread_mutex_lock(&m->mu);
    gp__mslot **pp = &m->slots;
    while (*pp && (*pp)->key != b->in)
        pp = &(*pp)->next;
    gp__mslot *s = *pp;
    if (s) *pp = s->next;
    pthread_mutex_unlock(&m->mu);
    if (!s) return;
#ifdef GP_HAVE_CUDA
    if (s->backend == GP_BACKEND_CUDA) gp__model_cuda_teardown(m, s->cuda, b);
#endif
    free(s->scratch);
    free(s);
}

static int model_compute(void *user, const gp_batch *b) {
    gp__model *m = user;
    gp__mslot *s = find_slot(m, b->in);
    if (!s) {
        set_last_error(m, GP_EINVAL, "compute for a slot that was not set up");
        return GP_EINVAL;
    }
    if (b->backend != GP_BACKEND_HOST) {
#ifdef GP_HAVE_CUDA
        return gp__model_cuda_run(m, s->cuda, b); /* records its own detail on failure */
#else
        set_last_error(m, GP_ENOTSUP, "this build has no CUDA layers");
        return GP_ENOTSUP;
#endif
    }
    int rc = host_run_chunked(m, b->n, b->in, b->out, s);
    if (rc != GP_OK) set_last_error(m, rc, "a batch failed in the model's host compute");
    return rc;
}

int gp_model_configure(gp_model *m, gp_config *cfg) {
    if (!m || !cfg) return GP_EINVAL;
    if (cfg->struct_size < offsetof(gp_config, prep_workers)) return GP_EINVAL;
    cfg->item_in_bytes = m->in_info.bytes;
    cfg->item_out_bytes = m->out_info.bytes;
    if (m->max_batch) cfg->max_batch = m->max_batch;
    cfg->compute = model_compute;
    cfg->compute_user = m;
    cfg->compute_setup = model_setup;
    cfg->compute_teardown = model_teardown;
    return GP_OK;
}

int gp_model_run_host(gp_model *m, size_t n, const void *in, void *out, char *err, size_t err_len) {
    gp__err e = {err, err_len};
    if (!m || (n && (!in || !out))) return gp__errf(&e, GP_EINVAL, "NULL argument");
    if (n == 0) return GP_OK;
    gp__mslot s = {0};
    if (host_slot_alloc(m, &s, host_chunk(m, n)) != GP_OK)
        return gp__errf(&e, GP_ENOMEM, "out of memory for the host scratch");
    int rc = host_run_chunked(m, n, in, out, &s);
    free(s.scratch);
    return rc == GP_OK ? GP_OK : gp__errf(&e, rc, "host run failed");
}

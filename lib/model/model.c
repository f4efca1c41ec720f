/*
 * The public model API: load (mmap + strict parse + build), queries, and the pipeline glue:
 * the compute functions gp_model_configure installs, which find the layers of the batch's
 * backend through the backend table (lib/backend.h, model/exec.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../backend.h"
#include "build.h"
#include "exec.h"
#include "host.h"
#include "model_impl.h"
#include "safetensors.h"

#define GP__SPEC_FILE_MAX (1u << 20)

void gp_model_free(gp_model *m) {
    gp__model_destroy(m);
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
    gp__model *m = gp__model_new();
    if (!m) {
        free(spec);
        gp__st_free(&st);
        return gp__errf(e, GP_ENOMEM, "out of memory");
    }
    m->spec = spec;
    m->precision = opt->precision;
    m->max_batch = opt->max_batch;
    m->max_tokens = opt->max_tokens;
    m->max_batch_tokens = opt->max_batch_tokens;
    rc = gp__model_build(m, spec, &st, e);
    gp__st_free(&st);
    if (rc == GP_OK && m->token_bytes && m->max_batch_tokens > SIZE_MAX / m->token_bytes)
        rc = gp__errf(e, GP_EINVAL,
                      "options.max_batch_tokens %zu times the %zu bytes of a token overflows "
                      "size_t (gp_config.max_batch_bytes is at most 1 GiB)",
                      m->max_batch_tokens, m->token_bytes);
    if (rc == GP_OK && m->token_bytes && m->max_batch_tokens && m->max_batch_tokens < m->max_tokens)
        rc = gp__errf(e, GP_EINVAL,
                      "options.max_batch_tokens %zu is below the %zu tokens one item may have "
                      "(%s): an item must fit a batch",
                      m->max_batch_tokens, m->max_tokens,
                      m->positions_limit ? "the position embeddings' rows" : "options.max_tokens");
    if (rc == GP_OK) rc = gp__host_prepare(m, e);
    if (rc == GP_OK && opt->profile && gp__prof_init(m) != GP_OK)
        rc = gp__errf(e, GP_ENOMEM, "out of memory");
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
    if (!data) return gp__errf(&e, GP_EINVAL, "data is NULL");
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

int64_t gp_model_vocab(const gp_model *m) {
    /* Only embeddings read token ids (build.c); with several, an id must fit each. */
    int64_t v = 0;
    for (int i = 0; m && m->token_bytes && i < m->n_ops; i++)
        if (m->ops[i].kind == GP__OP_EMBEDDING && (!v || m->ops[i].vocab < v)) v = m->ops[i].vocab;
    return v;
}

size_t gp_model_input_bytes(const gp_model *m) {
    if (!m) return 0;
    return m->token_bytes ? m->max_tokens * m->token_bytes : m->in_info.bytes;
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
    for (int d = 0; d < t->rank && o < len; d++) {
        if (t->dims[d] < 0) /* variable length */
            o += (size_t)snprintf(buf + o, len - o, "%s*", d ? "x" : "");
        else
            o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? "x" : "", (long long)t->dims[d]);
    }
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
    if (m->token_bytes) {
        /* The token limit: options.max_tokens, or a position table when it is shorter; the
           ids: those every embedding takes (gp_model_vocab). */
        const char *limit =
            m->positions_limit ? "the position embeddings' rows" : "options.max_tokens";
        int64_t vocab = gp_model_vocab(m);
        if (vocab)
            return fprintf(f,
                           "input:  %s per item: 1..%zu token ids (the limit: %s) of %zu bytes, "
                           "packed (variable length); ids 0..%lld\n",
                           in, m->max_tokens, limit, m->token_bytes, (long long)vocab - 1) < 0;
        return fprintf(f,
                       "input:  %s per item: 1..%zu tokens of %zu bytes, packed (variable "
                       "length), no normalization\n",
                       in, m->max_tokens, m->token_bytes) < 0;
    }
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
    int w = 20; /* the name column: as wide as the longest name (a BERT layer's runs to 40+) */
    for (int i = 0; i < m->n_ops; i++) {
        int l = (int)strlen(m->ops[i].name);
        if (l > w) w = l;
    }
    for (int i = 0; i < m->n_ops; i++) {
        const gp__op *op = &m->ops[i];
        char si[32], so[32], ss[8], sd[8], s2[8];
        gp__shape_str(op->in, si, sizeof si);
        gp__shape_str(op->out, so, sizeof so);
        bad |= fprintf(f, "%3d  line %-3d %-13s %-*s %12s -> %-12s %-7s %s%s%s -> %s  %.3g MFLOP\n",
                       i, op->line, gp__op_name(op->kind), w, op->name, si, so,
                       op->act ? gp__act_name(op->act) : "", buf_name(op->src, ss, sizeof ss),
                       gp__op_has_src2(op) ? " + " : "",
                       gp__op_has_src2(op) ? buf_name(op->src2, s2, sizeof s2) : "",
                       buf_name(op->dst, sd, sizeof sd), op->flops * 1e-6) < 0;
    }
    bad |= describe_output(m, f);
    if (m->token_bytes)
        bad |= fprintf(f,
                       "buffers: %d, scratch %zu floats per item + %zu per token; %.4g MFLOP for a "
                       "one-token item (attention's scores excluded)\n",
                       m->n_bufs, m->scratch_elems, m->scratch_tok_elems, m->flops * 1e-6) < 0;
    else
        bad |= fprintf(f, "buffers: %d, scratch %zu floats per item; %.4g MFLOP per item\n",
                       m->n_bufs, m->scratch_elems, m->flops * 1e-6) < 0;
    /* Flush: a write error inside the FILE's buffer surfaces here, not at the caller's fclose
       (as the stats renderers, lib/render.c). */
    bad |= fflush(f) != 0 || ferror(f);
    return bad ? GP_EIO : GP_OK;
}

int gp_model_last_error(gp_model *m, char *buf, size_t len) {
    if (!m) {
        if (buf && len) buf[0] = '\0';
        return GP_EINVAL;
    }
    return gp__err_copy(&m->err, buf, len);
}

/* ---- pipeline glue ----------------------------------------------------------------------- */

/* The model's detail of a failure becomes part of the pipeline's last error too. */
static void share_error(gp__model *m, const gp_batch *b) {
    char msg[256];
    gp__err_copy(&m->err, msg, sizeof msg);
    gp_batch_set_error(b, "%s", msg);
}

/* What a slot's slot_user holds: its backend's layer table and that table's slot state. */
typedef struct mslot {
    const gp__model_exec *exec;
    void *state;
} mslot;

/* The backend's check of a finished batch (exec.h), registered by model_setup. */
static int model_check(void *user, const gp_batch *b) {
    const mslot *s = b->slot_user;
    int rc = s->exec->check(user, s->state, b);
    if (rc != GP_OK) share_error(user, b);
    return rc;
}

static int model_setup(void *user, const gp_batch *b) {
    gp__model *m = user;
    char why[256];
    const gp__backend *be;
    int rc = gp__backend_load(b->backend, &be, why, sizeof why);
    if (rc != GP_OK) return GP__ERR(&m->err, rc, "model setup: %s", why);
    if (!be->model)
        return GP__ERR(&m->err, GP_ENOTSUP, "the %s backend has no model layers", be->name);
    mslot *s = calloc(1, sizeof *s);
    if (!s) return GP__ERR(&m->err, GP_ENOMEM, "model setup: out of memory");
    s->exec = be->model;
    /* gp_model_free frees each backend's model-wide state through the table that made it. */
    pthread_mutex_lock(&m->mu);
    m->exec[be->id] = be->model;
    pthread_mutex_unlock(&m->mu);
    if ((rc = s->exec->setup(m, b, &s->state)) != GP_OK ||
        (rc = gp_batch_set_slot_user(b, s)) != GP_OK ||
        (s->exec->check && (rc = gp__batch_set_check(b, model_check, m)) != GP_OK)) {
        if (s->state) s->exec->teardown(m, s->state, b);
        free(s);
        share_error(m, b);
        return rc;
    }
    return GP_OK;
}

static void model_teardown(void *user, const gp_batch *b) {
    gp__model *m = user;
    mslot *s = b->slot_user;
    if (!s) return;
    s->exec->teardown(m, s->state, b);
    free(s);
}

static int model_compute(void *user, const gp_batch *b) {
    const mslot *s = b->slot_user; /* set by model_setup: no lookup, no lock */
    int rc = s->exec->run(user, s->state, b);
    if (rc != GP_OK) share_error(user, b);
    return rc;
}

int gp_model_configure(gp_model *m, gp_config *cfg) {
    if (!m || !cfg) return GP_EINVAL;
    if (cfg->struct_size < offsetof(gp_config, prep_workers)) return GP_EINVAL;
#define REACHES(f) (cfg->struct_size >= offsetof(gp_config, f) + sizeof cfg->f)
    /* The item sizes are the model's, of either kind: the other kind's fields are cleared,
       each as far as cfg->struct_size reaches, so a gp_config configured for one model can be
       configured for another (model.h). */
    if (m->token_bytes) { /* variable length: items of 1..max_tokens tokens, packed */
        if (!REACHES(max_batch_bytes)) return GP_EINVAL;
        cfg->item_in_bytes = 0;
        cfg->max_item_in_bytes = m->max_tokens * m->token_bytes;
        cfg->max_batch_bytes = m->max_batch_tokens ? m->max_batch_tokens * m->token_bytes : 0;
        /* Whole tokens at submit: a part-token item fails alone there, not its batch. */
        if (REACHES(item_in_multiple)) cfg->item_in_multiple = m->token_bytes;
    } else {
        cfg->item_in_bytes = m->in_info.bytes;
        if (REACHES(max_item_in_bytes)) cfg->max_item_in_bytes = 0;
        if (REACHES(arena_bytes)) cfg->arena_bytes = 0;
        if (REACHES(max_batch_bytes)) cfg->max_batch_bytes = 0;
        if (REACHES(item_in_multiple)) cfg->item_in_multiple = 0;
    }
    if (REACHES(max_item_out_bytes)) cfg->max_item_out_bytes = 0;
#undef REACHES
    cfg->item_out_bytes = m->out_info.bytes;
    if (m->max_batch) cfg->max_batch = m->max_batch;
    cfg->compute = model_compute;
    cfg->compute_user = m;
    cfg->compute_setup = model_setup;
    cfg->compute_teardown = model_teardown;
    return GP_OK;
}

int gp_model_run_host_packed(gp_model *m, size_t n, const void *in, const uint64_t *in_offsets,
                             void *out, char *err, size_t err_len) {
    gp__err e = {err, err_len};
    if (!m || (n && (!in || !out || !in_offsets))) return gp__errf(&e, GP_EINVAL, "NULL argument");
    if (!m->token_bytes)
        return gp__errf(&e, GP_EINVAL, "a fixed-size model: use gp_model_run_host");
    if (n == 0) return GP_OK;
    int rc = gp__host_run_packed(m, n, in, in_offsets, out, &e);
    return rc;
}

int gp_model_run_host(gp_model *m, size_t n, const void *in, void *out, char *err, size_t err_len) {
    gp__err e = {err, err_len};
    if (!m || (n && (!in || !out))) return gp__errf(&e, GP_EINVAL, "NULL argument");
    if (m->token_bytes)
        return gp__errf(&e, GP_EINVAL,
                        "a variable-length model: use gp_model_run_host_packed with offsets");
    if (n == 0) return GP_OK;
    int rc = gp__host_run_alone(m, n, in, out);
    return rc == GP_OK ? GP_OK : gp__errf(&e, rc, "host run failed");
}

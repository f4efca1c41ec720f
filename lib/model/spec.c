/* Layer spec parser (see spec.h). */
#include "spec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *keyword;
    int opts;     /* accepted */
    int takes;    /* 1: a layer name, 2: a tag */
    int required; /* options that must be given */
    double eps;   /* default eps (0: the op has none) */
} kinds[GP__SPEC_KIND_COUNT_] = {
#define GP__SPEC_ROW(kind, keyword, opts, takes, required, eps)                                    \
    [GP__SPEC_##kind] = {keyword, opts, takes, required, eps},
    GP__SPEC_LIST(GP__SPEC_ROW)
#undef GP__SPEC_ROW
};

const char *gp__spec_kind_name(gp__spec_kind k) {
    return (unsigned)k < GP__SPEC_KIND_COUNT_ ? kinds[k].keyword : "?";
}

#define MAX_TOKENS 32
#define MAX_TOKEN 2048 /* a word: mean=/std= with 64 values of full precision fit */

typedef struct tok {
    const char *p;
    size_t n;
} tok;

static int tok_is(tok t, const char *s) {
    return strlen(s) == t.n && memcmp(t.p, s, t.n) == 0;
}

/* ASCII case-insensitive: op names are accepted as PyTorch spells its classes (Conv2d, ReLU). */
static int tok_is_ci(tok t, const char *s) {
    if (strlen(s) != t.n) return 0;
    for (size_t i = 0; i < t.n; i++) {
        char a = t.p[i], b = s[i];
        if (a >= 'A' && a <= 'Z') a = (char)(a - 'A' + 'a');
        if (b >= 'A' && b <= 'Z') b = (char)(b - 'A' + 'a');
        if (a != b) return 0;
    }
    return 1;
}

/* Strict decimal integer in [lo, hi]. */
static int parse_int(const char *p, size_t n, int lo, int hi, int *out) {
    if (n == 0 || n > 10) return 0;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (p[i] - '0');
    }
    if (v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

/* "N" or "HxW". */
static int parse_pair(tok v, int lo, int out[2]) {
    const char *x = memchr(v.p, 'x', v.n);
    if (!x) return parse_int(v.p, v.n, lo, GP__SPEC_MAX_DIM, &out[0]) && (out[1] = out[0], 1);
    size_t a = (size_t)(x - v.p);
    return parse_int(v.p, a, lo, GP__SPEC_MAX_DIM, &out[0]) &&
           parse_int(x + 1, v.n - a - 1, lo, GP__SPEC_MAX_DIM, &out[1]);
}

static int parse_double(tok v, double *out) {
    char buf[64];
    if (v.n == 0 || v.n >= sizeof buf) return 0;
    memcpy(buf, v.p, v.n);
    buf[v.n] = '\0';
    /* strtod accepts hex, inf, nan and leading spaces: allow only plain decimal forms. */
    for (size_t i = 0; i < v.n; i++)
        if (!strchr("0123456789.eE+-", buf[i])) return 0;
    char *end;
    errno = 0;
    double d = strtod(buf, &end);
    if (end != buf + v.n || errno != 0 || !isfinite(d)) return 0;
    *out = d;
    return 1;
}

/* Comma-separated numbers, at most `max`: 0 on a bad number (then *n == 0) or one too many
   (then *n == max). */
static int parse_floats(tok v, float *out, int max, int *n) {
    *n = 0;
    size_t i = 0;
    while (i <= v.n) {
        size_t j = i;
        while (j < v.n && v.p[j] != ',')
            j++;
        double d;
        if (!parse_double((tok){v.p + i, j - i}, &d)) {
            *n = 0; /* a bad number, not one too many */
            return 0;
        }
        if (*n == max) return 0;
        out[(*n)++] = (float)d;
        i = j + 1;
    }
    return 1;
}

typedef struct lctx {
    gp__err *e;
    int line;
    const char *op;
} lctx;

static int lerr(lctx *c, const char *what, tok t) {
    return gp__errf(c->e, GP_EMODEL, "spec line %d: %s: %s '%.*s'", c->line, c->op, what,
                    (int)(t.n > 80 ? 80 : t.n), t.p);
}

/* Option keys; the first with a bit is its canonical name. */
static const struct {
    const char *name;
    int bit;
} keys[] = {{"kernel", GP__O_KERNEL},
            {"kernel_size", GP__O_KERNEL}, /* PyTorch's name */
            {"dim", GP__O_DIM},
            {"stride", GP__O_STRIDE},
            {"padding", GP__O_PADDING},
            {"dilation", GP__O_DILATION},
            {"groups", GP__O_GROUPS},
            {"eps", GP__O_EPS},
            {"k", GP__O_K},
            {"layout", GP__O_LAYOUT},
            {"mean", GP__O_MEAN},
            {"std", GP__O_STD},
            {"heads", GP__O_HEADS},
            {"num_heads", GP__O_HEADS}, /* nn.MultiheadAttention's name */
            {"position", GP__O_POSITION},
            {"token_type", GP__O_TOKEN_TYPE},
            {"q", GP__O_QKVO},
            {"v", GP__O_QKVO},
            {"out", GP__O_QKVO}};

/* A tensor prefix given as an option's value (position=, q=, ...): a state_dict path. */
static int parse_ref(tok v, char *out) {
    if (v.n == 0 || v.n >= GP__SPEC_MAX_NAME) return 0;
    for (size_t i = 0; i < v.n; i++)
        if (v.p[i] == '=' || v.p[i] == ',') return 0;
    memcpy(out, v.p, v.n);
    out[v.n] = '\0';
    return 1;
}

/* mean=/std= with a value past GP__SPEC_MAX_CH (parse_floats: *n == max). */
static int too_many_values(lctx *c, tok t) {
    char what[96];
    snprintf(what, sizeof what,
             "bad value (at most %d values: one for every channel, or one per channel)",
             GP__SPEC_MAX_CH);
    return lerr(c, what, t);
}

static int parse_option(lctx *c, gp__spec_line *l, tok t, int allowed, int *seen) {
    const char *eq = memchr(t.p, '=', t.n);
    tok key = {t.p, (size_t)(eq - t.p)};
    tok val = {eq + 1, t.n - key.n - 1};
    int bit = 0, ref = -1;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (tok_is(key, keys[i].name)) bit = keys[i].bit;
    /* topk's k= and attention's k= share a key: the kind decides. */
    if (bit == GP__O_K && (allowed & GP__O_QKVO)) bit = GP__O_QKVO;
    if (bit == GP__O_QKVO) {
        ref = tok_is(key, "q")   ? GP__REF_Q
              : tok_is(key, "k") ? GP__REF_K
              : tok_is(key, "v") ? GP__REF_V
                                 : GP__REF_OUT;
        if (allowed & GP__O_QKVO) {
            if (l->ref[ref][0]) return lerr(c, "option given twice", key);
            if (!parse_ref(val, l->ref[ref])) return lerr(c, "bad value (a layer name)", t);
            return GP_OK;
        }
    }
    if (!bit || !(allowed & bit)) {
        if (bit == GP__O_KERNEL && (allowed & GP__O_GROUPS))
            return gp__errf(c->e, GP_EMODEL,
                            "spec line %d: %s: unknown option '%.*s' (the kernel size comes from "
                            "the weight's shape)",
                            c->line, c->op, (int)(key.n > 80 ? 80 : key.n), key.p);
        return lerr(c, "unknown option", key);
    }
    if (*seen & bit) return lerr(c, "option given twice", key);
    *seen |= bit;
    int ok = 0;
    switch (bit) {
    case GP__O_KERNEL:
        ok = parse_pair(val, 1, l->kernel);
        break;
    case GP__O_STRIDE:
        ok = parse_pair(val, 1, l->stride);
        l->has_stride = 1;
        break;
    case GP__O_PADDING:
        ok = parse_pair(val, 0, l->padding);
        break;
    case GP__O_DILATION:
        ok = parse_pair(val, 1, l->dilation);
        break;
    case GP__O_GROUPS:
        ok = parse_int(val.p, val.n, 1, GP__SPEC_MAX_DIM, &l->groups);
        break;
    case GP__O_EPS:
        ok = parse_double(val, &l->eps) && l->eps > 0;
        break;
    case GP__O_K:
        ok = parse_int(val.p, val.n, 1, GP__SPEC_MAX_DIM, &l->k);
        break;
    case GP__O_LAYOUT:
        ok = tok_is(val, "hwc") || tok_is(val, "chw");
        l->hwc = tok_is(val, "hwc");
        break;
    case GP__O_MEAN:
        ok = parse_floats(val, l->mean, GP__SPEC_MAX_CH, &l->n_mean);
        if (!ok && l->n_mean == GP__SPEC_MAX_CH) return too_many_values(c, t);
        break;
    case GP__O_DIM:
        ok = tok_is(val, "1") || tok_is(val, "-1");
        if (!ok)
            return lerr(c,
                        "bad value (softmax runs over the features of a flat value: dim=1 or "
                        "dim=-1)",
                        t);
        break;
    case GP__O_HEADS:
        ok = parse_int(val.p, val.n, 1, GP__SPEC_MAX_DIM, &l->heads);
        break;
    case GP__O_POSITION:
        ok = parse_ref(val, l->ref[GP__REF_POSITION]);
        break;
    case GP__O_TOKEN_TYPE:
        ok = parse_ref(val, l->ref[GP__REF_TOKEN_TYPE]);
        break;
    case GP__O_STD:
        ok = parse_floats(val, l->std, GP__SPEC_MAX_CH, &l->n_std);
        if (!ok && l->n_std == GP__SPEC_MAX_CH) return too_many_values(c, t);
        for (int i = 0; ok && i < l->n_std; i++)
            ok = l->std[i] != 0.0f;
        break;
    }
    if (!ok) return lerr(c, "bad value", t);
    return GP_OK;
}

static int parse_input(lctx *c, gp__spec_line *l, tok *tk, int nt, int *used) {
    if (nt < 3)
        return gp__errf(c->e, GP_EMODEL, "spec line %d: input: expected 'input <f32|u8> <shape>'",
                        c->line);
    if (tok_is(tk[1], "f32"))
        l->dtype = GP_DTYPE_F32;
    else if (tok_is(tk[1], "u8"))
        l->dtype = GP_DTYPE_U8;
    else if (tok_is(tk[1], "i32"))
        l->dtype = GP_DTYPE_I32;
    else if (tok_is(tk[1], "i64"))
        l->dtype = GP_DTYPE_I64;
    else if (tok_is(tk[1], "u32"))
        l->dtype = GP_DTYPE_U32;
    else
        return lerr(c, "unknown dtype (f32 | u8 | i32 | i64 | u32)", tk[1]);
    tok s = tk[2];
    const char *forms = "bad shape (features, C x H x W as 3x32x32, or variable length: * for "
                        "token ids, *xF for tokens of F features)";
    l->rank = 0;
    size_t i = 0;
    while (i <= s.n) {
        size_t j = i;
        while (j < s.n && s.p[j] != 'x')
            j++;
        if (l->rank == 0 && j - i == 1 && s.p[i] == '*') {
            l->dims[0] = -1; /* variable length (docs/DESIGN.md §8.7) */
        } else if (l->rank == 3 || !parse_int(s.p + i, j - i, 1, 1 << 24, &l->dims[l->rank])) {
            return lerr(c, forms, s);
        }
        l->rank++;
        i = j + 1;
    }
    int var = l->dims[0] < 0;
    if (var ? l->rank > 2 : l->rank == 2) return lerr(c, forms, s);
    int ids = l->dtype == GP_DTYPE_I32 || l->dtype == GP_DTYPE_I64 || l->dtype == GP_DTYPE_U32;
    if (ids && !(var && l->rank == 1))
        return lerr(c, "i32 / i64 / u32 inputs are token ids: shape * (variable length)", tk[1]);
    if (l->dtype == GP_DTYPE_U8 && var)
        return lerr(c,
                    "a variable-length input is f32 tokens (*xF) or token ids (i32 | i64 | u32 *)",
                    tk[1]);
    size_t total = 1;
    for (int d = var; d < l->rank; d++)
        total *= (size_t)l->dims[d];
    if (total > (1u << 28)) return lerr(c, "shape too large", s);
    *used = 3;
    return GP_OK;
}

/* `AdaptiveAvgPool2d <size>` (PyTorch's class) is globalavgpool when the output size is 1:
   "1", "1x1", "(1,1)", with or without "output_size=", and as PyTorch prints the module,
   "(1, 1)" (two words, joined here). Any other size is refused, not approximated. Consumes
   the size words: *nt becomes 1. */
static int parse_adaptive(lctx *c, tok *tk, int *nt) {
    if (*nt < 2)
        return gp__errf(c->e, GP_EMODEL,
                        "spec line %d: AdaptiveAvgPool2d: give the output size, as in "
                        "'AdaptiveAvgPool2d 1' (only 1 is supported: it is globalavgpool)",
                        c->line);
    /* A second word only after a comma: "(1," "1)" is PyTorch's tuple, "1 1" is two words. */
    char joined[32];
    size_t n = 0;
    int words = *nt == 3 && tk[1].n && tk[1].p[tk[1].n - 1] == ',' ? 2 : 1;
    for (int i = 1; i <= words && n < sizeof joined; i++)
        for (size_t k = 0; k < tk[i].n && n < sizeof joined; k++)
            joined[n++] = tk[i].p[k];
    tok v = {joined, n};
    if (v.n > 12 && memcmp(v.p, "output_size=", 12) == 0) v.p += 12, v.n -= 12;
    const char *last = tk[*nt - 1].p + tk[*nt - 1].n; /* the words as written, for the error */
    int shown = (int)(last - tk[1].p > 80 ? 80 : last - tk[1].p);
    if (n == sizeof joined || *nt > 1 + words ||
        !(tok_is(v, "1") || tok_is(v, "1x1") || tok_is(v, "(1,1)")))
        return gp__errf(c->e, GP_EMODEL,
                        "spec line %d: AdaptiveAvgPool2d: only output size 1 is supported (it is "
                        "globalavgpool); got '%.*s': for a larger output, use avgpool2d with "
                        "kernel = stride = input size / output size",
                        c->line, shown, tk[1].p);
    *nt = 1;
    return GP_OK;
}

static int parse_line(lctx *c, gp__spec_line *l, tok *tk, int nt) {
    int kind = -1, rc;
    for (int k = 0; k < GP__SPEC_KIND_COUNT_; k++)
        if (tok_is_ci(tk[0], kinds[k].keyword)) kind = k;
    if (kind < 0 && tok_is_ci(tk[0], "MultiheadAttention")) kind = GP__SPEC_ATTENTION;
    if (kind < 0 && tok_is_ci(tk[0], "AdaptiveAvgPool2d")) {
        if ((rc = parse_adaptive(c, tk, &nt)) != GP_OK) return rc;
        kind = GP__SPEC_GLOBALAVGPOOL;
    }
    if (kind < 0) {
        char ops[512];
        size_t n = 0;
        for (int k = 0; k < GP__SPEC_KIND_COUNT_; k++)
            n += (size_t)snprintf(ops + n, sizeof ops - n, "%s%s", k ? ", " : "", kinds[k].keyword);
        return gp__errf(c->e, GP_EMODEL,
                        "spec line %d: unknown op '%.*s' (ops: %s; see docs/MODELS.md)", c->line,
                        (int)(tk[0].n > 80 ? 80 : tk[0].n), tk[0].p, ops);
    }
    l->kind = (gp__spec_kind)kind;
    c->op = kinds[kind].keyword;
    l->stride[0] = l->stride[1] = 1;
    l->dilation[0] = l->dilation[1] = 1;
    l->groups = 1;
    l->eps = kinds[kind].eps;
    int used = 1;
    if (kind == GP__SPEC_INPUT && (rc = parse_input(c, l, tk, nt, &used)) != GP_OK) return rc;
    if (kind == GP__SPEC_POOL) {
        if (nt < 2 || !(tok_is(tk[1], "cls") || tok_is(tk[1], "mean")))
            return gp__errf(c->e, GP_EMODEL,
                            "spec line %d: pool: expected 'pool cls' (each item's first token) or "
                            "'pool mean' (the mean over each item's tokens)",
                            c->line);
        l->pool_cls = tok_is(tk[1], "cls");
        used = 2;
    }
    if (kinds[kind].takes) {
        const char *what = kinds[kind].takes == 1 ? "layer name" : "tag";
        if (nt < 2 || memchr(tk[1].p, '=', tk[1].n))
            return gp__errf(c->e, GP_EMODEL, "spec line %d: %s: expected a %s", c->line, c->op,
                            what);
        if (tk[1].n >= GP__SPEC_MAX_NAME) return lerr(c, "name too long", tk[1]);
        memcpy(l->name, tk[1].p, tk[1].n);
        l->name[tk[1].n] = '\0';
        used = 2;
    }
    int seen = 0;
    for (int i = used; i < nt; i++) {
        if (!memchr(tk[i].p, '=', tk[i].n)) return lerr(c, "unexpected word", tk[i]);
        if ((rc = parse_option(c, l, tk[i], kinds[kind].opts, &seen)) != GP_OK) return rc;
    }
    int missing = kinds[kind].required & ~seen;
    for (size_t i = 0; missing && i < sizeof keys / sizeof keys[0]; i++)
        if (missing & keys[i].bit) /* "kernel=K is required" */
            return gp__errf(c->e, GP_EMODEL, "spec line %d: %s: %s=%c is required", c->line, c->op,
                            keys[i].name, (char)(keys[i].name[0] - 'a' + 'A'));
    if (kind == GP__SPEC_ATTENTION) {
        int given = 0;
        for (int r = GP__REF_Q; r <= GP__REF_OUT; r++)
            given += l->ref[r][0] != '\0';
        if (given != 0 && given != 4)
            return gp__errf(c->e, GP_EMODEL,
                            "spec line %d: attention: give all four of q=, k=, v=, out= (the "
                            "projection layers' names under '%s') or none",
                            c->line, l->name);
    }
    if (kind == GP__SPEC_INPUT) {
        if (l->hwc && l->rank != 3)
            return gp__errf(c->e, GP_EMODEL, "spec line %d: input: layout=hwc needs H x W x C",
                            c->line);
        int ch = l->rank == 3 ? (l->hwc ? l->dims[2] : l->dims[0]) : l->dims[0];
        if ((l->n_mean && l->n_mean != 1 && l->n_mean != ch) ||
            (l->n_std && l->n_std != 1 && l->n_std != ch))
            return gp__errf(c->e, GP_EMODEL,
                            "spec line %d: input: mean/std need 1 or %d values (one per channel), "
                            "got %d/%d",
                            c->line, ch, l->n_mean, l->n_std);
        if ((l->n_mean || l->n_std) && l->rank != 3)
            return gp__errf(c->e, GP_EMODEL, "spec line %d: input: mean/std need a C x H x W input",
                            c->line);
    }
    return GP_OK;
}

int gp__spec_parse(const char *text, gp__spec *out, gp__err *e) {
    out->lines = NULL;
    out->n = 0;
    if (!text) return gp__errf(e, GP_EMODEL, "no spec");
    int cap = 0, line = 0, rc = GP_OK;
    const char *p = text;
    while (*p) {
        line++;
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *hash = memchr(p, '#', len);
        size_t body = hash ? (size_t)(hash - p) : len;
        tok tk[MAX_TOKENS];
        int nt = 0;
        lctx c = {e, line, ""};
        for (size_t i = 0; i < body;) {
            while (i < body && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r'))
                i++;
            if (i == body) break;
            size_t j = i;
            while (j < body && p[j] != ' ' && p[j] != '\t' && p[j] != '\r')
                j++;
            if (nt == MAX_TOKENS) {
                rc = gp__errf(e, GP_EMODEL, "spec line %d: too many words", line);
                goto fail;
            }
            if (j - i > MAX_TOKEN) {
                rc = gp__errf(e, GP_EMODEL, "spec line %d: a word of %zu characters (at most %d)",
                              line, j - i, MAX_TOKEN);
                goto fail;
            }
            for (size_t k = i; k < j; k++) {
                if ((unsigned char)p[k] < 0x20 || p[k] == 0x7f) {
                    rc = gp__errf(e, GP_EMODEL, "spec line %d: control character", line);
                    goto fail;
                }
            }
            tk[nt++] = (tok){p + i, j - i};
            i = j;
        }
        if (nt > 0) {
            if (out->n == cap) {
                int ncap = cap ? cap * 2 : 16;
                gp__spec_line *nl = realloc(out->lines, (size_t)ncap * sizeof *nl);
                if (!nl) {
                    rc = gp__errf(e, GP_ENOMEM, "out of memory");
                    goto fail;
                }
                out->lines = nl;
                cap = ncap;
            }
            gp__spec_line *l = &out->lines[out->n];
            memset(l, 0, sizeof *l);
            l->line = line;
            if ((rc = parse_line(&c, l, tk, nt)) != GP_OK) goto fail;
            out->n++;
        }
        if (!eol) break;
        p = eol + 1;
    }
    if (out->n == 0) {
        rc = gp__errf(e, GP_EMODEL, "spec is empty (it needs at least an 'input' line)");
        goto fail;
    }
    return GP_OK;
fail:
    gp__spec_free(out);
    return rc;
}

void gp__spec_free(gp__spec *s) {
    if (!s) return;
    free(s->lines);
    s->lines = NULL;
    s->n = 0;
}

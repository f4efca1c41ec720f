/*
 * Built-in demo models: deterministic random weights (PyTorch's default init ranges) written
 * as an in-memory safetensors image with the spec in its metadata, then loaded through the
 * same strict loader as any file.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"
#include "gpupipe/model.h"
#include "safetensors.h"

static const char mlp_spec[] = "# demo mlp: MNIST-sized classifier\n"
                               "input f32 784\n"
                               "linear fc1\n"
                               "relu\n"
                               "linear fc2\n"
                               "relu\n"
                               "linear fc3\n"
                               "softmax\n";

static const char cnn_spec[] =
    "# demo cnn: ResNet-style image classifier, u8 images in, top-5 classes out\n"
    "input u8 32x32x3 layout=hwc mean=0.485,0.456,0.406 std=0.229,0.224,0.225\n"
    "conv2d conv1 padding=1\n"
    "batchnorm2d bn1\n"
    "relu\n"
    "save s\n"
    "conv2d layer1.0.conv1 stride=2 padding=1\n"
    "batchnorm2d layer1.0.bn1\n"
    "relu\n"
    "conv2d layer1.0.conv2 padding=1\n"
    "batchnorm2d layer1.0.bn2\n"
    "save main\n"
    "restore s\n"
    "conv2d layer1.0.downsample.0 stride=2\n"
    "batchnorm2d layer1.0.downsample.1\n"
    "add main\n"
    "relu\n"
    "maxpool2d kernel=2\n"
    "conv2d conv3 padding=1\n"
    "batchnorm2d bn3\n"
    "relu\n"
    "globalavgpool\n"
    "flatten\n"
    "linear fc\n"
    "softmax\n"
    "topk k=5\n";

/* demo encoder: a BERT-style text encoder in Hugging Face BertModel naming (post-LN layers),
   token ids in, the L2-normalized mean of the last layer's tokens out (sentence embeddings). */
#define ENC_LAYERS 4
#define ENC_HIDDEN 256
#define ENC_HEADS 4
#define ENC_FF 1024
#define ENC_VOCAB 30522
#define ENC_POSITIONS 512

static int encoder_spec(char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len,
                                "# demo encoder: BERT-style, %d layers, hidden %d, %d heads; "
                                "token ids in, L2-normalized mean-pooled embedding out\n"
                                "input i32 *\n"
                                "embedding embeddings\n"
                                "layernorm embeddings.LayerNorm eps=1e-12\n",
                                ENC_LAYERS, ENC_HIDDEN, ENC_HEADS);
    for (int i = 0; i < ENC_LAYERS && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o,
                              "save x%d\n"
                              "attention encoder.layer.%d.attention heads=%d\n"
                              "add x%d\n"
                              "layernorm encoder.layer.%d.attention.output.LayerNorm eps=1e-12\n"
                              "save h%d\n"
                              "linear encoder.layer.%d.intermediate.dense\n"
                              "gelu\n"
                              "linear encoder.layer.%d.output.dense\n"
                              "add h%d\n"
                              "layernorm encoder.layer.%d.output.LayerNorm eps=1e-12\n",
                              i, i, ENC_HEADS, i, i, i, i, i, i, i);
    if (o < len) o += (size_t)snprintf(buf + o, len - o, "pool mean\nl2norm\n");
    return o < len;
}

typedef struct demo {
    gp__st_entry t[96];
    float *data[96];
    size_t n;
    uint64_t rng;
    int oom;
} demo;

static double uniform(demo *d) /* splitmix64 -> [0, 1) */
{
    uint64_t z = (d->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static float *add(demo *d, const char *layer, const char *suffix, int rank, const uint64_t *shape,
                  double lo, double hi) {
    if (d->oom || d->n == sizeof d->t / sizeof d->t[0]) {
        d->oom = 1;
        return NULL;
    }
    size_t numel = 1;
    for (int i = 0; i < rank; i++)
        numel *= (size_t)shape[i];
    size_t nl = strlen(layer) + strlen(suffix) + 2;
    char *name = malloc(nl);
    float *p = malloc(numel * sizeof *p);
    if (!name || !p) {
        free(name);
        free(p);
        d->oom = 1;
        return NULL;
    }
    memcpy(name, layer, strlen(layer));
    name[strlen(layer)] = '.';
    memcpy(name + strlen(layer) + 1, suffix, strlen(suffix) + 1);
    for (size_t i = 0; i < numel; i++)
        p[i] = (float)(lo + (hi - lo) * uniform(d));
    gp__st_entry *e = &d->t[d->n];
    e->name = name;
    e->dtype = GP__ST_F32;
    e->rank = rank;
    memcpy(e->shape, shape, (size_t)rank * sizeof *shape);
    e->data = p;
    d->data[d->n++] = p;
    return p;
}

/* nn.Linear / nn.Conv2d default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for both. */
static void linear(demo *d, const char *name, uint64_t in, uint64_t out) {
    double b = 1.0 / sqrt((double)in);
    add(d, name, "weight", 2, (uint64_t[]){out, in}, -b, b);
    add(d, name, "bias", 1, (uint64_t[]){out}, -b, b);
}

static void conv(demo *d, const char *name, uint64_t cin, uint64_t cout, uint64_t k) {
    double b = 1.0 / sqrt((double)(cin * k * k));
    add(d, name, "weight", 4, (uint64_t[]){cout, cin, k, k}, -b, b);
}

/* LayerNorm near the identity, as after training. */
static void layernorm(demo *d, const char *name, uint64_t c) {
    add(d, name, "weight", 1, (uint64_t[]){c}, 0.9, 1.1);
    add(d, name, "bias", 1, (uint64_t[]){c}, -0.05, 0.05);
}

/* The encoder's tensors, named as BertModel's state_dict. Embedding rows of BERT's init scale
   (std 0.02); every sublayer ends in a LayerNorm, so activations stay normalized. */
static void encoder(demo *d) {
    const double e = 0.02 * 1.7320508075688772; /* uniform with std 0.02 */
    add(d, "embeddings", "word_embeddings.weight", 2, (uint64_t[]){ENC_VOCAB, ENC_HIDDEN}, -e, e);
    add(d, "embeddings", "position_embeddings.weight", 2, (uint64_t[]){ENC_POSITIONS, ENC_HIDDEN},
        -e, e);
    add(d, "embeddings", "token_type_embeddings.weight", 2, (uint64_t[]){2, ENC_HIDDEN}, -e, e);
    layernorm(d, "embeddings.LayerNorm", ENC_HIDDEN);
    static const char *const proj[] = {"attention.self.query", "attention.self.key",
                                       "attention.self.value", "attention.output.dense"};
    for (int i = 0; i < ENC_LAYERS; i++) {
        char n[96];
        for (int k = 0; k < 4; k++) {
            snprintf(n, sizeof n, "encoder.layer.%d.%s", i, proj[k]);
            linear(d, n, ENC_HIDDEN, ENC_HIDDEN);
        }
        snprintf(n, sizeof n, "encoder.layer.%d.attention.output.LayerNorm", i);
        layernorm(d, n, ENC_HIDDEN);
        snprintf(n, sizeof n, "encoder.layer.%d.intermediate.dense", i);
        linear(d, n, ENC_HIDDEN, ENC_FF);
        snprintf(n, sizeof n, "encoder.layer.%d.output.dense", i);
        linear(d, n, ENC_FF, ENC_HIDDEN);
        snprintf(n, sizeof n, "encoder.layer.%d.output.LayerNorm", i);
        layernorm(d, n, ENC_HIDDEN);
    }
}

/* Trained-looking batchnorm statistics, so activations keep a sane scale. */
static void bn(demo *d, const char *name, uint64_t c) {
    add(d, name, "weight", 1, (uint64_t[]){c}, 0.5, 1.5);
    add(d, name, "bias", 1, (uint64_t[]){c}, -0.1, 0.1);
    add(d, name, "running_mean", 1, (uint64_t[]){c}, -0.1, 0.1);
    add(d, name, "running_var", 1, (uint64_t[]){c}, 0.5, 1.5);
}

int gp_model_demo_safetensors(const char *name, const gp_model_options *opt, void **data,
                              size_t *bytes, char *err, size_t err_len) {
    gp__err e = {err, err_len};
    if (err && err_len) err[0] = '\0';
    if (data) *data = NULL;
    if (bytes) *bytes = 0;
    if (!name || !data || !bytes) return gp__errf(&e, GP_EINVAL, "NULL argument");
    gp_model_options o;
    int rc = gp__model_options_copy(&o, opt, &e);
    if (rc != GP_OK) return rc;
    demo *d = calloc(1, sizeof *d);
    if (!d) return gp__errf(&e, GP_ENOMEM, "out of memory");
    d->rng = o.seed;
    const char *spec;
    char enc_spec[4096];
    if (strcmp(name, "mlp") == 0) {
        spec = mlp_spec;
        linear(d, "fc1", 784, 1024);
        linear(d, "fc2", 1024, 1024);
        linear(d, "fc3", 1024, 10);
    } else if (strcmp(name, "cnn") == 0) {
        spec = cnn_spec;
        conv(d, "conv1", 3, 32, 3);
        bn(d, "bn1", 32);
        conv(d, "layer1.0.conv1", 32, 64, 3);
        bn(d, "layer1.0.bn1", 64);
        conv(d, "layer1.0.conv2", 64, 64, 3);
        bn(d, "layer1.0.bn2", 64);
        conv(d, "layer1.0.downsample.0", 32, 64, 1);
        bn(d, "layer1.0.downsample.1", 64);
        conv(d, "conv3", 64, 128, 3);
        bn(d, "bn3", 128);
        linear(d, "fc", 128, 100);
    } else if (strcmp(name, "encoder") == 0) {
        if (!encoder_spec(enc_spec, sizeof enc_spec)) {
            free(d);
            return gp__errf(&e, GP_EINVAL, "internal: the encoder's spec does not fit");
        }
        spec = enc_spec;
        encoder(d);
    } else {
        free(d);
        return gp__errf(&e, GP_EINVAL, "unknown demo model '%.64s' (mlp | cnn | encoder)", name);
    }
    if (d->oom)
        rc = gp__errf(&e, GP_ENOMEM, "out of memory");
    else
        rc = gp__st_build(d->t, d->n, spec, data, bytes, &e);
    for (size_t i = 0; i < d->n; i++) {
        free((void *)d->t[i].name);
        free(d->data[i]);
    }
    free(d);
    return rc;
}

int gp_model_demo(const char *name, const gp_model_options *opt, gp_model **out, char *err,
                  size_t err_len) {
    if (out) *out = NULL;
    if (!out) return gp__errf(&(gp__err){err, err_len}, GP_EINVAL, "out is NULL");
    gp__err e = {err, err_len};
    gp_model_options o;
    int rc = gp__model_options_copy(&o, opt, &e);
    if (rc != GP_OK) return rc;
    o.spec_text = NULL; /* the demo's own spec, from its metadata */
    o.spec_path = NULL;
    void *img;
    size_t len;
    if ((rc = gp_model_demo_safetensors(name, &o, &img, &len, err, err_len)) != GP_OK) return rc;
    rc = gp_model_load_memory(img, len, &o, out, err, err_len);
    free(img);
    return rc;
}

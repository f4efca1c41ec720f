/*
 * The strict loader: every malformed safetensors image or inconsistent spec is rejected with
 * GP_EMODEL and a message that names the problem (and the tensor or spec line); well-formed
 * ones load, from memory and from a file (mmap, spec in metadata or beside the file).
 */
#include <gpupipe/model.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt.h"

/* An image: 8-byte little-endian header length, the header text, `data` bytes of 0x3f. */
static uint8_t *image(const char *header, uint64_t hlen_field, size_t data, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data;
    uint8_t *p = malloc(*len);
    GPT_CHECK(p);
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(hlen_field >> (8 * i));
    memcpy(p + 8, header, h);
    memset(p + 8 + h, 0x3f, data);
    return p;
}

static const char *spec_lin = "input f32 4\nlinear fc\n";

/* Load `header` + data with `spec` (NULL: from the metadata); expect `want` and, when
   `needle` is given, that it appears in the message. */
static void expect_hl(const char *what, const char *header, uint64_t hlen, size_t data,
                      const char *spec, int want, const char *needle) {
    size_t len;
    uint8_t *img = image(header, hlen, data, &len);
    gp_model_options o;
    gp_model_options_init(&o);
    o.spec_text = spec;
    gp_model *m = (gp_model *)1;
    char err[512] = "";
    int rc = gp_model_load_memory(img, len, &o, &m, err, sizeof err);
    if (rc != want || (needle && !strstr(err, needle))) {
        fprintf(stderr, "%s: got %s '%s', want %s containing '%s'\n", what, gp_err_name(rc), err,
                gp_err_name(want), needle ? needle : "");
        exit(1);
    }
    if (rc == GP_OK) {
        GPT_CHECK(m != NULL);
        GPT_CHECK(err[0] == '\0'); /* a successful load writes no message */
        gp_model_free(m);
    } else {
        GPT_CHECK(m == NULL);
        GPT_CHECK(err[0] != '\0');
    }
    printf("ok  %-44s %s\n", what, rc == GP_OK ? "loads" : err);
    free(img);
}

static void expect(const char *what, const char *header, size_t data, const char *spec, int want,
                   const char *needle) {
    expect_hl(what, header, strlen(header), data, spec, want, needle);
}

#define FC_OK                                                                                      \
    "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48]},"                   \
    "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[48,60]}"

static void structure(void) {
    expect("valid", "{" FC_OK "}", 60, spec_lin, GP_OK, NULL);
    expect("valid, whitespace and padding", " \n{ " FC_OK " }  \t", 60, spec_lin, GP_EMODEL,
           "not a JSON object"); /* the header must start with '{' */
    expect("valid, trailing spaces", "{" FC_OK "}     ", 60, spec_lin, GP_OK, NULL);
    expect("extra unused tensors (int)",
           "{" FC_OK ",\"steps\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[60,68]}}", 68,
           spec_lin, GP_OK, NULL);
    /* Dtypes this library does not know (newer safetensors: F8_E8M0 scales, complex C64) in
       tensors the spec does not name: loaded, only their offsets checked (docs/MODELS.md). */
    expect("extra unused tensor, dtype unknown here",
           "{" FC_OK ",\"scale\":{\"dtype\":\"F8_E8M0\",\"shape\":[4],\"data_offsets\":[60,"
           "64]},\"z\":{\"dtype\":\"C64\",\"shape\":[2],\"data_offsets\":[64,80]}}",
           80, spec_lin, GP_OK, NULL);
    expect("extra unused tensor, dtype unknown here, past the end",
           "{" FC_OK ",\"scale\":{\"dtype\":\"F8_E8M0\",\"shape\":[4],\"data_offsets\":[60,"
           "99]}}",
           64, spec_lin, GP_EMODEL, "tensor 'scale': data_offsets end 99 is outside the data");
    expect("extra unused tensor, dtype overlapping",
           "{" FC_OK ",\"scale\":{\"dtype\":\"F8_E8M0\",\"shape\":[4],\"data_offsets\":[40,"
           "64]}}",
           64, spec_lin, GP_EMODEL, "overlap");

    size_t len;
    uint8_t *img = image("{}", 2, 0, &len);
    char err[256];
    gp_model *m;
    GPT_RC(gp_model_load_memory(img, 5, NULL, &m, err, sizeof err), GP_EMODEL);
    GPT_CHECK(strstr(err, "too short"));
    free(img);
    /* NULL data is a NULL argument (model.h), whatever the length; *out is NULL. */
    m = (gp_model *)&len;
    GPT_RC(gp_model_load_memory(NULL, 0, NULL, &m, err, sizeof err), GP_EINVAL);
    GPT_CHECK(m == NULL && strstr(err, "data is NULL"));
    GPT_RC(gp_model_load_memory(NULL, 16, NULL, &m, err, sizeof err), GP_EINVAL);

    expect_hl("header length over the limit", "{}", 100000001ull, 0, spec_lin, GP_EMODEL,
              "not a safetensors file: its first 8 bytes give a header length of 100000001, "
              "over the format's limit of 100000000 bytes");
    expect_hl("header length past the end", "{}", 4096, 0, spec_lin, GP_EMODEL,
              "past the end of the file");
    expect_hl("header length 2^64-1", "{}", UINT64_MAX, 0, spec_lin, GP_EMODEL,
              "over the format's limit");
    expect("header not an object", "[1,2]", 0, spec_lin, GP_EMODEL, "not a JSON object");
    expect("truncated JSON", "{\"fc.weight\":{\"dtype\":\"F32\"", 0, spec_lin, GP_EMODEL,
           "malformed JSON");
    expect("trailing characters", "{" FC_OK "}x", 60, spec_lin, GP_EMODEL, "trailing");
    expect("duplicate key", "{" FC_OK "," FC_OK "}", 60, spec_lin, GP_EMODEL, "duplicate key");
    expect("single quotes", "{'a':1}", 0, spec_lin, GP_EMODEL, "malformed JSON");
    expect("trailing comma", "{" FC_OK ",}", 60, spec_lin, GP_EMODEL, "malformed JSON");
    expect("invalid UTF-8", "{\"a\xff\":{}}", 0, spec_lin, GP_EMODEL, "UTF-8");
    expect("overlong UTF-8", "{\"a\xc0\xaf\":{}}", 0, spec_lin, GP_EMODEL, "UTF-8");
    expect("raw control character", "{\"a\tb\":{}}", 0, spec_lin, GP_EMODEL, "control");
    expect("NUL in a tensor name",
           "{" FC_OK
           ",\"extra\\u0000x\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[60,60]}}",
           60, spec_lin, GP_EMODEL,
           "NUL (\\u0000) in an object key, which this loader does not support");
    expect("bad escape", "{\"a\\q\":{}}", 0, spec_lin, GP_EMODEL, "escape");
    expect("unpaired surrogate", "{\"a\\ud800\":{}}", 0, spec_lin, GP_EMODEL, "surrogate");
    expect("leading zero number",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[03,4],\"data_offsets\":[0,48]}}", 48,
           spec_lin, GP_EMODEL, "malformed JSON");
    char deep[400];
    size_t o = 0;
    o += (size_t)snprintf(deep, sizeof deep, "{\"a\":");
    for (int i = 0; i < 100; i++)
        deep[o++] = '[';
    for (int i = 0; i < 100; i++)
        deep[o++] = ']';
    snprintf(deep + o, sizeof deep - o, "}");
    expect("nesting too deep", deep, 0, spec_lin, GP_EMODEL, "too deep");

    expect("unknown dtype",
           "{\"fc.weight\":{\"dtype\":\"F33\",\"shape\":[3,4],\"data_offsets\":[0,48]}}", 48,
           spec_lin, GP_EMODEL, "tensor 'fc.weight': unknown dtype 'F33'");
    expect("dtype not a string",
           "{\"fc.weight\":{\"dtype\":4,\"shape\":[3,4],\"data_offsets\":[0,48]}}", 48, spec_lin,
           GP_EMODEL, "tensor 'fc.weight': dtype is not a string");
    expect("unknown field",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48],\"x\":1}}",
           48, spec_lin, GP_EMODEL, "unknown header field 'x'");
    expect("missing data_offsets", "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4]}}", 48,
           spec_lin, GP_EMODEL, "tensor 'fc.weight': missing data_offsets");
    expect("negative dim",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[-3,4],\"data_offsets\":[0,48]}}", 48,
           spec_lin, GP_EMODEL, "shape[0] is not a non-negative integer");
    expect("fractional dim",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4.5],\"data_offsets\":[0,48]}}", 48,
           spec_lin, GP_EMODEL, "shape[1]");
    expect("rank over 8",
           "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
           spec_lin, GP_EMODEL, "tensor 't': rank 9 exceeds 8");
    expect("shape overflow",
           "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}",
           4, spec_lin, GP_EMODEL, "tensor 't': shape overflows");
    expect("span != shape x dtype",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,44]}}", 48,
           spec_lin, GP_EMODEL,
           "tensor 'fc.weight': shape x F32 size = 48 bytes but data_offsets "
           "span 44");
    expect("offsets outside the data",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[16,64]}}", 48,
           spec_lin, GP_EMODEL, "tensor 'fc.weight': data_offsets end 64 is outside the data");
    expect("begin > end",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[48,0]}}", 48,
           spec_lin, GP_EMODEL, "begin 48 > end 0");
    expect("offsets not a pair",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0]}}", 48, spec_lin,
           GP_EMODEL, "tensor 'fc.weight': data_offsets is not [begin, end]");
    expect("overlapping tensors",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48]},"
           "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[40,52]}}",
           60, spec_lin, GP_EMODEL, "overlap");
    expect("metadata not strings", "{\"__metadata__\":{\"gpupipe.spec\":1}," FC_OK "}", 60, NULL,
           GP_EMODEL, "__metadata__ value 'gpupipe.spec' is not a string");
    expect("metadata not an object", "{\"__metadata__\":[]," FC_OK "}", 60, NULL, GP_EMODEL,
           "__metadata__ is not an object");
    expect("no spec anywhere", "{" FC_OK "}", 60, NULL, GP_EMODEL, "no spec");
    expect("spec from metadata (escaped newline, unicode key)",
           "{\"__metadata__\":{\"gpupipe.spec\":\"input f32 4\\nlinear fc\\n\","
           "\"caf\\u00e9\":\"\\ud83d\\ude00\"}," FC_OK "}",
           60, NULL, GP_OK, NULL);
}

/* The data section must be covered exactly, as the reference loader (the safetensors crate)
   requires: no bytes after the last tensor, no gaps, the first tensor at offset 0. */
static void coverage(void) {
    expect("4 bytes after the last tensor", "{" FC_OK "}", 64, spec_lin, GP_EMODEL,
           "4 unused bytes after the last tensor: the tensors end at data offset 60 but the file "
           "has 64 bytes of data");
    expect("data but no tensors", "{}", 8, spec_lin, GP_EMODEL, "8 unused bytes");
    expect("gap between tensors",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48]},"
           "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[52,64]}}",
           64, spec_lin, GP_EMODEL,
           "tensor 'fc.bias': data_offsets [52, 64) leave bytes [48, 52) of the data unused");
    expect("first tensor not at 0",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[4,52]}}", 52,
           spec_lin, GP_EMODEL, "leave bytes [0, 4) of the data unused");
    expect("empty tensor inside another",
           "{" FC_OK ",\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}", 60,
           spec_lin, GP_EMODEL, "overlap");
    expect("empty tensors at the seams",
           "{" FC_OK ",\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[48,48]},"
           "\"f\":{\"dtype\":\"U8\",\"shape\":[0,3],\"data_offsets\":[60,60]}}",
           60, spec_lin, GP_OK, NULL);
    expect("tensors out of order in the header",
           "{\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[48,60]},"
           "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48]}}",
           60, spec_lin, GP_OK, NULL);
}

/* Files that are not safetensors at all: the message says what the file is and what to do. */
static void other_formats(void) {
    static const struct {
        const char *what;
        const uint8_t *bytes;
        size_t n;
        const char *needle;
    } cases[] = {
        /* torch.save (zip): local file header, then the first member's name */
        {"torch.save zip archive",
         (const uint8_t *)"PK\x03\x04\x00\x00\x08\x08\x00\x00\x00\x00\x00\x00\x00\x00"
                          "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00"
                          "archive/data.pklXXXXXXXXXXXXXXXXXXXX",
         66,
         "this looks like a torch.save archive (a zip file): export the model with "
         "tools/gpupipe_export.py"},
        {"NumPy .npz archive",
         (const uint8_t *)"PK\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
                          "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x00"
                          "arr_0.npyXXXXXXXX",
         56, "this is a NumPy .npz archive"},
        {"legacy torch.save (pickle protocol 2)",
         (const uint8_t *)"\x80\x02\x8a\x0a"
                          "l\xfc\x9c"
                          "F\xf9 j\xa8"
                          "P\x19.\x80\x02"
                          "M\xe9\x03.",
         22,
         "this looks like a Python pickle (legacy torch.save or pickle.dump): export the model "
         "with tools/gpupipe_export.py"},
        {"NumPy .npy array",
         (const uint8_t *)"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, "
                          "'shape': (2,), }",
         64, "this is a NumPy .npy array (an input?)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gp_model *m = (gp_model *)1;
        char err[512] = "";
        int rc = gp_model_load_memory(cases[i].bytes, cases[i].n, NULL, &m, err, sizeof err);
        if (rc != GP_EMODEL || m != NULL || !strstr(err, "not a safetensors file: ") ||
            !strstr(err, cases[i].needle)) {
            fprintf(stderr, "%s: got %s '%s', want GP_EMODEL containing '%s'\n", cases[i].what,
                    gp_err_name(rc), err, cases[i].needle);
            exit(1);
        }
        printf("ok  %-44s %s\n", cases[i].what, err);
    }
    /* A valid image whose header length (0x280 = 640) starts with the pickle bytes 80 02 is
       still a safetensors file: the format checks only look at files that fail as one. */
    char hdr[641];
    int n = snprintf(hdr, sizeof hdr, "{" FC_OK "}");
    memset(hdr + n, ' ', (size_t)(640 - n));
    hdr[640] = '\0';
    expect("header length 0x280 (bytes 80 02 ...)", hdr, 60, spec_lin, GP_OK, NULL);
}

static void against_spec(void) {
    expect("tensor missing", "{" FC_OK "}", 60, "input f32 4\nlinear fc\nlinear head\n", GP_EMODEL,
           "spec line 3: linear 'head': tensor 'head.weight' is missing");
    expect("wrong shape", "{" FC_OK "}", 60, "input f32 5\nlinear fc\n", GP_EMODEL,
           "spec line 2: linear 'fc': tensor 'fc.weight' has shape [3,4], expected [*,5]");
    expect("weight with a dimension of 0",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,0]}}", 0,
           spec_lin, GP_EMODEL,
           "tensor 'fc.weight' has shape [0,4], expected [*,4] (dimension 0 is 0)");
    expect("bias wrong shape",
           "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48]},"
           "\"fc.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[48,56]}}",
           56, spec_lin, GP_EMODEL, "tensor 'fc.bias' has shape [2], expected [3]");
    expect("integer weights",
           "{\"fc.weight\":{\"dtype\":\"I32\",\"shape\":[3,4],\"data_offsets\":[0,48]}}", 48,
           spec_lin, GP_EMODEL, "tensor 'fc.weight': dtype I32 is not a float type");
    expect("F16 weights",
           "{\"fc.weight\":{\"dtype\":\"F16\",\"shape\":[3,4],\"data_offsets\":[0,24]}}", 24,
           spec_lin, GP_OK, NULL);
    expect("conv weight rank",
           "{\"c.weight\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48]}}", 48,
           "input f32 4x8x8\nconv2d c\n", GP_EMODEL,
           "spec line 2: conv2d 'c': tensor 'c.weight' has shape [3,4], expected [*,4,*,*]");
    expect("conv channels vs groups",
           "{\"c.weight\":{\"dtype\":\"F32\",\"shape\":[3,2,1,1],\"data_offsets\":[0,24]}}", 24,
           "input f32 4x8x8\nconv2d c groups=2\n", GP_EMODEL, "not divisible by groups=2");
    expect("batchnorm stats missing",
           "{\"c.weight\":{\"dtype\":\"F32\",\"shape\":[2,4,1,1],\"data_offsets\":[0,32]}}", 32,
           "input f32 4x8x8\nconv2d c\nbatchnorm2d bn\n", GP_EMODEL,
           "spec line 3: batchnorm2d 'bn': tensor 'bn.running_mean' is missing");
}

/* From a file: mmap, spec in a file beside it, GP_EIO for a missing file. */
static void files(void) {
    char dir[] = "/tmp/gp_loader_XXXXXX";
    GPT_CHECK(mkdtemp(dir));
    char path[256], spec[256];
    snprintf(path, sizeof path, "%s/net.safetensors", dir);
    snprintf(spec, sizeof spec, "%s/net.spec", dir);
    size_t len;
    uint8_t *img = image("{" FC_OK "}", strlen("{" FC_OK "}"), 60, &len);
    FILE *f = fopen(path, "wb");
    GPT_CHECK(f && fwrite(img, 1, len, f) == len && fclose(f) == 0);
    free(img);
    gp_model *m;
    char err[512];
    GPT_RC(gp_model_load(path, NULL, &m, err, sizeof err), GP_EMODEL);
    GPT_CHECK(strstr(err, "net.spec"));
    f = fopen(spec, "w");
    GPT_CHECK(f && fputs("# beside\ninput f32 4\nlinear fc\nrelu\n", f) >= 0 && fclose(f) == 0);
    GPT_RC(gp_model_load(path, NULL, &m, err, sizeof err), GP_OK);
    GPT_EQ(gp_model_input_bytes(m), 16);
    GPT_EQ(gp_model_output_bytes(m), 12);
    GPT_CHECK(strstr(gp_model_spec(m), "# beside"));
    gp_model_free(m);

    gp_model_options o;
    gp_model_options_init(&o);
    o.spec_path = "/nonexistent/x.spec";
    GPT_RC(gp_model_load(path, &o, &m, err, sizeof err), GP_EIO);
    GPT_CHECK(strstr(err, "/nonexistent/x.spec"));
    GPT_RC(gp_model_load("/nonexistent/m.safetensors", NULL, &m, err, sizeof err), GP_EIO);
    GPT_RC(gp_model_load(dir, NULL, &m, err, sizeof err), GP_EIO);
    GPT_RC(gp_model_load(NULL, NULL, &m, err, sizeof err), GP_EINVAL);
    GPT_RC(gp_model_load(path, NULL, NULL, err, sizeof err), GP_EINVAL);
    o.struct_size = 0;
    GPT_RC(gp_model_load(path, &o, &m, err, sizeof err), GP_EINVAL);
    GPT_CHECK(strstr(err, "struct_size"));
    o.struct_size = sizeof o + 8; /* built against a newer header: its fields would go unread */
    GPT_RC(gp_model_load(path, &o, &m, err, sizeof err), GP_EINVAL);
    GPT_CHECK(strstr(err, "struct_size"));
    unlink(path);
    unlink(spec);
    rmdir(dir);
    gp_model_free(NULL);
    printf("ok  files\n");
}

int main(void) {
    structure();
    coverage();
    other_formats();
    against_spec();
    files();
    return 0;
}

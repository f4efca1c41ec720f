/*
 * gp-bench smoke test: a tiny sweep on the host backend writes CSV, JSON and SVG that are well
 * formed, the table ends with the pipeline/naive and pipeline/bound ratios (a ratio above the
 * bound is flagged, a bound cell is never blank), its verdict column is the report's first
 * verdict, other arrivals and a demo model run (with its CPU bound), and bad flags
 * give the usage and a nonzero exit. Variable-size items: every packing mode in one run, with
 * the token columns in the table, CSV and JSON, and the figures that follow from the lengths
 * alone (not the timing) checked; a variable-length model written here as a .safetensors file;
 * bad distributions and combinations refused with a message.
 * Usage: test_bench_smoke PATH/TO/gp-bench OUTPUT_DIR
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "../model/mt.h"
#include "gpt.h"
#include "jsoncheck.h"

static const char *bench, *dir;

/* The whole file `name` in the output directory, NUL-terminated; *len its size (optional). */
static char *slurp(const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "missing output %s\n", path);
        GPT_CHECK(0);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    GPT_CHECK(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    b[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return b;
}

/* Run gp-bench with `args`; stdout and stderr into malloc'ed strings. Returns the exit code,
   or -1 when it died of a signal. */
static int run(const char *args, char **out, char **err) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s/stdout.txt' 2>'%s/stderr.txt'", bench, args, dir, dir);
    printf("$ %s\n", cmd);
    int st = system(cmd);
    GPT_CHECK(st != -1);
    *out = slurp("stdout.txt", NULL);
    *err = slurp("stderr.txt", NULL);
    fputs(*out, stdout);
    fputs(*err, stdout);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static const char *verdicts[] = {
    "no-work",   "gpu-not-used",  "producers", "prep",     "h2d",   "compute", "d2h",
    "callbacks", "small-batches", "enqueue",   "inflight", "mixed", "padding", "serial"};
static const char *packings[] = {"fixed", "packed", "padded", "padmax", "serial"};

static int known(const char *v, const char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v, names[i])) return 1;
    return 0;
}

static void check_csv(int want_pipeline_rows, int want_naive) {
    size_t len;
    char *t = slurp("out.csv", &len), *save = NULL;
    int rows = 0, naive = 0, cols = -1;
    for (char *line = strtok_r(t, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int c = 1;
        for (char *p = line; *p; p++)
            c += *p == ',';
        if (cols < 0) {
            GPT_CHECK(strncmp(line, "kind,batch,inflight,producers,", 30) == 0);
            cols = c;
            continue;
        }
        GPT_EQ(c, cols); /* rectangular */
        char *fsave = NULL, *field = strtok_r(line, ",", &fsave);
        GPT_CHECK(!strcmp(field, "pipeline") || !strcmp(field, "naive"));
        double pct[3] = {0}; /* p50, p95, p99 (fields 7..9): in order, on every row (the naive
                                row's p95 was 0) */
        rows += !strcmp(field, "pipeline");
        naive += !strcmp(field, "naive");
        for (int k = 1; (field = strtok_r(NULL, ",", &fsave)); k++) {
            if (k == 17 || k == 23) { /* verdict, bottleneck */
                GPT_CHECK(known(field, verdicts, sizeof verdicts / sizeof verdicts[0]));
                continue;
            }
            if (k == 25) { /* packing */
                GPT_CHECK(known(field, packings, sizeof packings / sizeof packings[0]));
                continue;
            }
            char *end;
            double d = strtod(field, &end);
            GPT_CHECK(end != field && *end == '\0' && d >= 0);
            if (k >= 7 && k <= 9) pct[k - 7] = d;
        }
        GPT_CHECK(pct[0] > 0 && pct[0] <= pct[1] && pct[1] <= pct[2]);
    }
    GPT_EQ(cols, 33); /* ... computed_tokens, launch_us */
    GPT_EQ(rows, want_pipeline_rows);
    GPT_EQ(naive, want_naive);
    free(t);
}

static void check_json(int want_points) {
    size_t len, at;
    char *t = slurp("out.json", &len);
    const char *e = jsoncheck(t, len, &at);
    if (e) fprintf(stderr, "out.json invalid at %zu: %s\n", at, e);
    GPT_CHECK(e == NULL);
    GPT_CHECK(strstr(t, "\"tool\":\"gp-bench\"") && strstr(t, "\"points\":["));
    /* items_per_s: each point's own, its bound's, and the naive baseline's. */
    GPT_EQ(count(t, "\"items_per_s\":"), 2 * want_points + (strstr(t, "\"naive\":{") != NULL));
    GPT_EQ(count(t, "\"bound\":{"), want_points);
    GPT_CHECK(strstr(t, "\"pipeline_over_naive\":") && strstr(t, "\"pipeline_over_bound\":"));
    free(t);
}

/* Well-formed XML for what gp-bench writes: a prolog, elements that nest and close, quoted
   attributes, no stray '<' or '&' in text. */
static void check_svg(void) {
    size_t len;
    char *t = slurp("out.svg", &len);
    char stack[64][32];
    int depth = 0, elements = 0, polylines = 0;
    const char *p = t;
    GPT_CHECK(strncmp(p, "<?xml ", 6) == 0);
    p = strstr(p, "?>");
    GPT_CHECK(p);
    p += 2;
    while (*p) {
        if (*p != '<') {
            if (*p == '&')
                GPT_CHECK(!strncmp(p, "&lt;", 4) || !strncmp(p, "&gt;", 4) ||
                          !strncmp(p, "&amp;", 5) || !strncmp(p, "&quot;", 6));
            GPT_CHECK(*p != '>');
            if (depth == 0) GPT_CHECK(*p == '\n' || *p == ' ');
            p++;
            continue;
        }
        if (p[1] == '/') { /* end tag */
            size_t n = strcspn(p + 2, ">");
            GPT_CHECK(depth > 0 && n == strlen(stack[depth - 1]) &&
                      !strncmp(p + 2, stack[depth - 1], n));
            depth--;
            p += 3 + n;
            continue;
        }
        size_t n = strcspn(p + 1, " />");
        GPT_CHECK(n > 0 && n < 32);
        if (elements++ == 0)
            GPT_CHECK(!strncmp(p + 1, "svg", 3) && n == 3);
        else
            GPT_CHECK(depth > 0);
        polylines += n == 8 && !strncmp(p + 1, "polyline", 8);
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)n, p + 1);
        p += 1 + n;
        for (;;) { /* attributes */
            while (*p == ' ' || *p == '\n')
                p++;
            if (*p == '/' || *p == '>') break;
            size_t an = strcspn(p, "= />");
            GPT_CHECK(an > 0 && p[an] == '=' && p[an + 1] == '"');
            const char *q = strchr(p + an + 2, '"');
            if (!strcmp(name, "polyline") && an == 6 && !strncmp(p, "points", 6)) {
                /* a line over batch sizes runs left to right, whatever the --batch order */
                double last = -1, x, y;
                int used;
                for (const char *s = p + 8; s < q && sscanf(s, "%lf,%lf%n", &x, &y, &used) == 2;
                     s += used) {
                    GPT_CHECK(x > last);
                    last = x;
                }
            }
            GPT_CHECK(q && !memchr(p + an + 2, '<', (size_t)(q - (p + an + 2))));
            p = q + 1;
        }
        if (*p == '/') {
            GPT_CHECK(p[1] == '>');
            p += 2;
        } else {
            GPT_CHECK(depth < 64);
            snprintf(stack[depth++], sizeof stack[0], "%s", name);
            p++;
        }
    }
    GPT_EQ(depth, 0);
    GPT_CHECK(elements > 20 && polylines >= 3); /* throughput, bound, latency */
    free(t);
}

/* The table's rows: lines that start with a batch size after the header line. For each, the
   verdict column (after `mean`) and the bound cells must be present; returns the rows seen and
   copies the verdicts into `verdicts_out` (space separated). */
static int check_table(const char *out, int bound, char *verdicts_out, size_t len) {
    const char *hdr = strstr(out, "\n batch ");
    GPT_CHECK(hdr != NULL);
    const char *line = strchr(hdr + 1, '\n') + 1;
    char head[512];
    snprintf(head, sizeof head, "%.*s", (int)(line - hdr), hdr);
    GPT_CHECK(strstr(head, " verdict ") && strstr(head, " bottleneck"));
    /* swept dimensions add a column each after the batch */
    int x = (strstr(head, " packing ") != NULL) + (strstr(head, " inflight ") != NULL) +
            (strstr(head, " producers ") != NULL) + (strstr(head, " delay us ") != NULL);
    int tok = strstr(head, " tok/s ") ? 3 : 0; /* tok/s, H2D B/it, pad% after bottleneck */
    int rows = 0;
    verdicts_out[0] = '\0';
    while (*line == ' ' || (*line >= '0' && *line <= '9')) {
        char row[512];
        size_t n = strcspn(line, "\n");
        GPT_CHECK(n < sizeof row);
        memcpy(row, line, n);
        row[n] = '\0';
        char *save = NULL, *col[24];
        int nc = 0;
        for (char *c = strtok_r(row, " ", &save); c && nc < 24; c = strtok_r(NULL, " ", &save))
            col[nc++] = c;
        /* batch items/s p50 p95 p99 compute% h2d d2h enq launch mean verdict bottleneck [tok/s
           h2d/it pad%] [bound %] */
        GPT_CHECK(nc == x + tok + (bound ? 15 : 13));
        if (tok) GPT_CHECK(col[x + 15][strlen(col[x + 15]) - 1] == '%');
        /* launch us: part of enq us */
        GPT_CHECK(strtod(col[x + 9], NULL) <= strtod(col[x + 8], NULL) * 1.001 + 0.001);
        snprintf(verdicts_out + strlen(verdicts_out), len - strlen(verdicts_out), "%s ",
                 col[x + 11]);
        int b = x + tok + 13;
        if (bound && strncmp(col[b], "n/a[", 4) == 0) { /* no bound: said why below */
            GPT_CHECK(strcmp(col[b + 1], "-") == 0 && strstr(out, ": no bound: ") != NULL);
        } else if (bound) {
            char *end;
            double pct = strtod(col[b + 1], &end);
            GPT_CHECK(end != col[b + 1] && *end == '%');
            /* above the bound: flagged in the cell and explained below the table */
            if (pct > 102.5) GPT_CHECK(end[1] == '!' && strstr(out, "a measurement problem"));
        }
        rows++;
        line += n + (line[n] == '\n');
    }
    const char *pb = strstr(out, "pipeline/bound = ");
    if (pb && strtod(pb + strlen("pipeline/bound = "), NULL) > 1.025)
        GPT_CHECK(strstr(pb, "ABOVE THE BOUND") != NULL);
    return rows;
}

/* With --report, each point's report starts with "verdict: X": the same X as the table's
   verdict column, point by point. */
static void check_report_verdicts(const char *out, const char *table_verdicts) {
    char got[512] = "";
    for (const char *p = strstr(out, "\n---- "); p; p = strstr(p + 1, "\n---- ")) {
        const char *v = strstr(p, "\nverdict: ");
        GPT_CHECK(v != NULL);
        v += strlen("\nverdict: ");
        snprintf(got + strlen(got), sizeof got - strlen(got), "%.*s ", (int)strcspn(v, " "), v);
    }
    if (strcmp(got, table_verdicts) != 0) {
        fprintf(stderr, "report verdicts '%s', table verdicts '%s'\n", got, table_verdicts);
        GPT_CHECK(0);
    }
}

/* out.csv as rows of named fields (check_csv checked its shape). */
typedef struct csv {
    char *text;
    char *head[40], *f[64][40];
    int rows, cols;
} csv;

static void csv_load(csv *c) {
    memset(c, 0, sizeof *c);
    c->text = slurp("out.csv", NULL);
    char *save = NULL;
    for (char *line = strtok_r(c->text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char **dst = c->cols ? c->f[c->rows] : c->head;
        int n = 0;
        for (char *p = line; n < 40; n++) {
            dst[n] = p;
            char *comma = strchr(p, ',');
            if (!comma) {
                n++;
                break;
            }
            *comma = '\0';
            p = comma + 1;
        }
        if (c->cols == 0) {
            c->cols = n;
        } else {
            GPT_EQ(n, c->cols);
            GPT_CHECK(++c->rows < 64);
        }
    }
}

static const char *csv_get(const csv *c, int row, const char *name) {
    for (int k = 0; k < c->cols; k++)
        if (!strcmp(c->head[k], name)) return c->f[row][k];
    fprintf(stderr, "no CSV column %s\n", name);
    GPT_CHECK(0);
    return NULL;
}

static double csv_num(const csv *c, int row, const char *name) {
    return strtod(csv_get(c, row, name), NULL);
}

/* The pipeline row of `packing`; -1 when none. */
static int csv_row(const csv *c, const char *packing) {
    for (int r = 0; r < c->rows; r++)
        if (!strcmp(c->f[r][0], "pipeline") && !strcmp(csv_get(c, r, "packing"), packing)) return r;
    return -1;
}

static int near(double a, double b, double rel) {
    return fabs(a - b) <= rel * fabs(b);
}

/* A variable-length model (f32 tokens of 8 features, token-wise linear and relu, the mean over
   each item's tokens, a linear head) as a .safetensors file with its spec in the metadata. */
static void write_model(const char *path, mt *t, const char *spec) {
    void *img;
    size_t n;
    char msg[256];
    gp__err e = {msg, sizeof msg};
    GPT_RC(gp__st_build(t->e, (size_t)t->n, spec, &img, &n, &e), GP_OK);
    FILE *f = fopen(path, "wb");
    GPT_CHECK(f && fwrite(img, 1, n, f) == n && fclose(f) == 0);
    free(img);
    mt_free(t);
}

static void write_varlen_model(const char *path) {
    mt t = {.rng = 42};
    mt_add(&t, "l1.weight", 2, (uint64_t[]){16, 8}, -0.3, 0.3);
    mt_add(&t, "l1.bias", 1, (uint64_t[]){16}, -0.1, 0.1);
    mt_add(&t, "l2.weight", 2, (uint64_t[]){4, 16}, -0.3, 0.3);
    mt_add(&t, "l2.bias", 1, (uint64_t[]){4}, -0.1, 0.1);
    write_model(path, &t, "input f32 *x8\nlinear l1\nrelu\nglobalavgpool\nlinear l2\n");
}

/* Token ids with a position table of 16 rows: the model's items are 1..16 tokens. */
static void write_short_positions_model(const char *path) {
    mt t = {.rng = 43};
    mt_add(&t, "e.weight", 2, (uint64_t[]){30, 8}, -1, 1);
    mt_add(&t, "p.weight", 2, (uint64_t[]){16, 8}, -1, 1);
    write_model(path, &t, "input i32 *\nembedding e position=p\npool mean\n");
}

/* gp-bench refuses `args` with exit `rc`, naming `needle` after "gp-bench: " on stderr, and
   runs no sweep (no table on stdout). */
static void expect_refused(const char *args, int rc, const char *needle) {
    char *out, *err;
    GPT_EQ(run(args, &out, &err), rc);
    GPT_CHECK(strstr(err, "gp-bench: ") != NULL && strstr(err, needle) != NULL);
    GPT_CHECK(strstr(out, " batch ") == NULL);
    free(out);
    free(err);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 3) {
        fprintf(stderr, "usage: test_bench_smoke GP_BENCH OUTPUT_DIR\n");
        return 2;
    }
    bench = argv[1];
    dir = argv[2];
    mkdir(dir, 0755);
    char *out, *err, args[4096];

    /* Bad flags: a one-line error pointing at --help, exit 2 (the help's "a bad option or
       value"), no crash. */
    const char *bad[] = {"--bogus",
                         "--batch 0",
                         "--batch 1,x",
                         "--arrival rate=-3",
                         "--backend gpu",
                         "--duration",
                         "--baseline fast",
                         "extra",
                         "--lengths normal:4,1",
                         "--lengths lognormal:4.5,0.9,8",
                         "--lengths lognormal:4.5,0,8,512",
                         "--lengths lognormal:4.5,0.9,512,8",
                         "--lengths uniform:0,8",
                         "--lengths uniform:8,4.5",
                         "--lengths fixed:",
                         "--packing sideways",
                         "--token-bytes 0",
                         "--vocab 0",
                         "--arrival rate=0.5", /* a window's batches would take minutes */
                         "--batch 1,,2",
                         "--batch 4,",
                         "--batch ' 4'",
                         "--inflight ,3",
                         "--baseline ''",
                         "--packing packed,,padmax",
                         "--batch 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,"
                         "25,26,27,28,29,30,31,32,33",
                         "--json --quiet"}; /* a forgotten value, not a file named --quiet */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run(bad[i], &out, &err);
        GPT_EQ(rc, 2);
        GPT_CHECK(strstr(err, "(gp-bench --help lists the options)") != NULL);
        free(out);
        free(err);
    }
    expect_refused("--batch 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,"
                   "26,27,28,29,30,31,32,33",
                   2, "expected a list of at most 32 sizes");
    /* Options the workload does not read are refused, not ignored: usage errors (2). */
    expect_refused("--backend host --precision fp16 --duration 0.05", 2,
                   "--precision: the synthetic workload has no layers");
    expect_refused("--backend host --vocab 5 --duration 0.05", 2,
                   "--vocab: the synthetic workload");
    expect_refused("--backend host --workload mlp --vocab 5 --duration 0.05", 2,
                   "--vocab: the model's input f32[784] is not token ids");
    /* Output paths are checked before the sweep (they were found unwritable after it). */
    snprintf(args, sizeof args, "--backend host --json '%s/no/such/dir/x.json'", dir);
    char why[700];
    snprintf(why, sizeof why, "--json %s/no/such/dir/x.json: no directory", dir);
    expect_refused(args, 2, why);
    expect_refused("--backend host --csv ''", 2, "an empty path");
    snprintf(args, sizeof args, "--backend host --csv '%s/same.out' --json '%s/same.out'", dir,
             dir);
    expect_refused(args, 2, "also --json's file (one would overwrite the other)");
    /* ... but /dev/null is shared by design. */
    GPT_EQ(run("--backend host --workload mlp --batch 2 --duration 0.05 --warmup 0 --baseline none "
               "-q --csv /dev/null --json /dev/null",
               &out, &err),
           0);
    free(out);
    free(err);
    char link[600], target[600];
    snprintf(link, sizeof link, "%s/dangling.json", dir);
    snprintf(target, sizeof target, "%s/no/such/dir/x.json", dir);
    unlink(link);
    GPT_CHECK(symlink(target, link) == 0);
    snprintf(args, sizeof args, "--backend host --json '%s'", link);
    expect_refused(args, 2, "a symbolic link to a missing file");
    snprintf(args, sizeof args, "--backend host --svg '%s'", dir);
    expect_refused(args, 2, "is a directory");
    GPT_EQ(run("--help", &out, &err), 0);
    GPT_CHECK(strstr(out, "--arrival") != NULL);
    free(out);
    free(err);

    /* A tiny sweep with both baselines and every output. */
    snprintf(args, sizeof args,
             "--backend host --batch 4,1,4 --duration 0.1 --warmup 0.05 --bound-duration 0.05 "
             "--compute-us 100 --compute-us-per-item 2 --baseline naive,bound --repeat 2 --report "
             "--csv '%s/out.csv' --json '%s/out.json' --svg '%s/out.svg'",
             dir, dir, dir);
    GPT_EQ(run(args, &out, &err), 0);
    GPT_CHECK(strstr(out, "verdict") != NULL);
    const char *ratios = strstr(out, "ratios: pipeline/naive = ");
    GPT_CHECK(ratios != NULL);
    GPT_CHECK(strtod(ratios + strlen("ratios: pipeline/naive = "), NULL) > 0);
    const char *pb = strstr(ratios, "pipeline/bound = ");
    GPT_CHECK(pb && strtod(pb + strlen("pipeline/bound = "), NULL) > 0);
    GPT_CHECK(strstr(err, "[") != NULL); /* progress on stderr */
    char verdicts_seen[512];
    GPT_EQ(check_table(out, 1, verdicts_seen, sizeof verdicts_seen), 2);
    check_report_verdicts(out, verdicts_seen);
    free(out);
    free(err);
    check_csv(2, 1);
    check_json(2);
    check_svg();
    char *sj = slurp("out.json", NULL);
    GPT_CHECK(strstr(sj, "\"precision\":null") != NULL); /* the synthetic workload has none */
    free(sj);
    /* A model on the host: the JSON says the precision it computed in (fp32), not the one
       asked for, as the text header does. */
    snprintf(args, sizeof args,
             "--backend host --workload mlp --precision fp16 --batch 4 --duration 0.05 "
             "--warmup 0 --baseline none -q --json '%s/out.json'",
             dir);
    GPT_EQ(run(args, &out, &err), 0);
    GPT_CHECK(strstr(out, "--precision fp16 applies on CUDA: the host computes in fp32") != NULL);
    free(out);
    free(err);
    check_json(1);
    sj = slurp("out.json", NULL);
    GPT_CHECK(strstr(sj, "\"precision\":\"fp32\"") != NULL);
    free(sj);

    /* A path that is not UTF-8 (a Latin-1 name) and has a control character: JSON stays valid
       (U+FFFD for the byte, \u0001 for the control), as the command line it records shows. */
    snprintf(args, sizeof args,
             "--backend host --batch 2 --duration 0.05 --warmup 0 --baseline none -q "
             "--json '%s/lat\xe9\x01.json'",
             dir);
    GPT_EQ(run(args, &out, &err), 0);
    free(out);
    free(err);
    size_t jl, at;
    char *jt = slurp("lat\xe9\x01.json", &jl);
    const char *je = jsoncheck(jt, jl, &at);
    if (je) fprintf(stderr, "JSON with a Latin-1 path invalid at %zu: %s\n", at, je);
    GPT_CHECK(je == NULL && strstr(jt, "lat\\ufffd\\u0001.json") && !strchr(jt, '\xe9'));
    free(jt);

    /* Open-loop arrivals, no baselines: the ratios line says n/a. */
    snprintf(args, sizeof args,
             "--backend host --batch 8 --arrival poisson=3000 --duration 0.1 --warmup 0.05 "
             "--baseline none -q --csv '%s/out.csv'",
             dir);
    GPT_EQ(run(args, &out, &err), 0);
    GPT_CHECK(strstr(out, "ratios: pipeline/naive = n/a; pipeline/bound = n/a") != NULL);
    GPT_CHECK(err[0] == '\0'); /* -q */
    free(out);
    free(err);
    check_csv(1, 0);

    /* A demo model through the same path (its host layers), fixed rate, two sweeps; the bound
       of CPU compute for 1 and 2 slot threads. */
    snprintf(args, sizeof args,
             "--backend host --workload mlp --batch 2 --inflight 1,2 --arrival rate=500 "
             "--duration 0.1 --warmup 0.05 --bound-duration 0.05 --baseline naive,bound -q");
    int rc = run(args, &out, &err);
    if (rc != 0 && strstr(err, "not built")) {
        printf("model workloads not built: skipped that part\n");
    } else {
        GPT_EQ(rc, 0);
        GPT_EQ(check_table(out, 1, verdicts_seen, sizeof verdicts_seen), 2);
        GPT_CHECK(strstr(out, "n/a[") == NULL);
        /* a model's CPU bound: its own CPU time per batch in the one-slot run */
        GPT_CHECK(strstr(out, "thread CPU time per batch in that one-slot run") != NULL);
    }
    free(out);
    free(err);

    /* CPU compute that gp-bench calls itself (--host-spin): its bound is the compute called
       directly on inflight threads. */
    GPT_EQ(run("--backend host --host-spin --batch 2 --compute-us 50 --compute-us-per-item 5 "
               "--duration 0.05 --warmup 0 --bound-duration 0.03 --baseline bound -q",
               &out, &err),
           0);
    GPT_EQ(check_table(out, 1, verdicts_seen, sizeof verdicts_seen), 1);
    GPT_CHECK(strstr(out, "compute called directly on 3 threads") != NULL);
    free(out);
    free(err);

    /* Bad distributions say what is expected. */
    GPT_CHECK(run("--lengths lognormal:4.5,0.9", &out, &err) == 2);
    GPT_CHECK(strstr(err, "expected lognormal:MU,SIGMA,A,B") != NULL);
    free(out);
    free(err);
    /* Token options without token counts, and --host-spin with them: refused with the reason. */
    GPT_CHECK(run("--backend host --packing padded", &out, &err) == 2);
    GPT_CHECK(strstr(err, "needs variable-size items") != NULL);
    free(out);
    free(err);
    GPT_CHECK(run("--backend host --lengths uniform:1,8 --host-spin", &out, &err) == 2);
    GPT_CHECK(strstr(err, "--host-spin: fixed-size items only") != NULL);
    free(out);
    free(err);
    expect_refused("--backend host --max-batch-tokens 64 --batch 4", 2,
                   "--max-batch-tokens: tokens need variable-size items");
    expect_refused("--backend host --token-bytes 8 --batch 4", 2,
                   "--token-bytes: tokens need variable-size items");
    expect_refused("--backend host --lengths uniform:1,8 --cuda-graphs --batch 4", 2,
                   "--cuda-graphs: fixed-size items only");
    expect_refused("--backend host --workload encoder --cuda-graphs --batch 4", 2,
                   "--cuda-graphs: the model encoder takes variable-length items");
    expect_refused("--backend host --arrival rate=1000 --window 4 --batch 4", 2,
                   "--window: sets the closed loop's items in flight");
    /* The synthetic workload's options with a model: refused, not silently ignored. */
    expect_refused("--workload mlp --backend host --compute-us=99 --batch 4", 2,
                   "--compute-us: the synthetic workload's; the model mlp");
    /* Option names before values: unknown is unknown, a flag takes no value, none stands
       alone, and the points limit is said before anything is printed. */
    expect_refused("--bogus", 2, "--bogus: unknown option");
    expect_refused("--report=1", 2, "takes no value");
    expect_refused("--baseline naive,none", 2, "expected naive, bound, naive,bound or none");
    GPT_CHECK(run("--backend host --batch 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20 "
                  "--inflight 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,"
                  "26",
                  &out, &err) == 2);
    GPT_CHECK(strstr(err, "520 points; at most 512") != NULL && out[0] == '\0');
    free(out);
    free(err);

    /* Variable-size items, every packing mode in one run, same items: the token columns; the
       figures that follow from the lengths (not from timing) are checked against them. Uniform
       8..64 tokens of 64 B: mean 36 tokens; padmax computes and moves 64 per item. */
    snprintf(args, sizeof args,
             "--backend host --lengths uniform:8,64 --token-bytes 64 --packing all --batch 8 "
             "--compute-us 50 --compute-us-per-item 1 --compute-us-per-token 0.5 --duration 0.15 "
             "--warmup 0.03 --bound-duration 0.05 --csv '%s/out.csv' --json '%s/out.json' "
             "--svg '%s/out.svg' -q",
             dir, dir, dir);
    GPT_EQ(run(args, &out, &err), 0);
    GPT_EQ(check_table(out, 1, verdicts_seen, sizeof verdicts_seen), 3);
    GPT_CHECK(strstr(out, "packing   packed, padded, padmax") != NULL);
    const char *cmp = strstr(out, "\nvariable-size items (uniform:8,64 tokens of 64 B");
    GPT_CHECK(cmp && strstr(cmp, "batch 8: packed ") && strstr(cmp, "; padded ") &&
              strstr(cmp, "; padmax ") && strstr(cmp, "packed does "));
    free(out);
    free(err);
    check_csv(3, 1);
    check_json(3);
    check_svg();
    {
        csv c;
        csv_load(&c);
        int pk = csv_row(&c, "packed"), pd = csv_row(&c, "padded"), pm = csv_row(&c, "padmax");
        GPT_CHECK(pk >= 0 && pd >= 0 && pm >= 0);
        for (int r = 0; r < c.rows; r++) {
            if (strcmp(c.f[r][0], "pipeline") != 0) continue;
            double mean = csv_num(&c, r, "mean_tokens");
            GPT_CHECK(mean >= 8 && mean <= 64); /* useful tokens per item, from the reports */
            GPT_CHECK(csv_num(&c, r, "tokens_per_s") > 0);
            GPT_CHECK(near(csv_num(&c, r, "useful_bytes_per_s"),
                           64 * csv_num(&c, r, "tokens_per_s"), 1e-3));
            GPT_CHECK(
                near(csv_num(&c, r, "tokens_per_s"), mean * csv_num(&c, r, "items_per_s"), 1e-3));
        }
        /* packed computes what it moves; padded pads on the device; padmax moves and computes
           64 tokens per item. */
        GPT_CHECK(csv_num(&c, pk, "padding") == 0);
        GPT_CHECK(near(csv_num(&c, pk, "computed_tokens"), csv_num(&c, pk, "mean_tokens"), 1e-6));
        GPT_CHECK(csv_num(&c, pd, "computed_tokens") > csv_num(&c, pd, "mean_tokens"));
        GPT_CHECK(csv_num(&c, pd, "padding") > 0 && csv_num(&c, pd, "padding") < 1);
        GPT_CHECK(near(csv_num(&c, pm, "computed_tokens"), 64, 1e-9));
        GPT_CHECK(near(csv_num(&c, pm, "padding"), 1 - csv_num(&c, pm, "mean_tokens") / 64, 1e-3));
        GPT_CHECK(near(csv_num(&c, pm, "h2d_bytes_per_item"), 64 * 64, 1e-9));
        /* packed H2D: the real tokens, plus the offsets (8 B per item and one per batch). */
        double pk_h2d = csv_num(&c, pk, "h2d_bytes_per_item");
        GPT_CHECK(pk_h2d >= 64 * csv_num(&c, pk, "mean_tokens") * 0.98 &&
                  pk_h2d <= 64 * csv_num(&c, pk, "mean_tokens") * 1.02 + 16);
        GPT_CHECK(pk_h2d < csv_num(&c, pm, "h2d_bytes_per_item"));
        /* The naive row: one item at its own length. */
        int nv = -1;
        for (int r = 0; r < c.rows; r++)
            if (!strcmp(c.f[r][0], "naive")) nv = r;
        GPT_CHECK(nv >= 0 && csv_num(&c, nv, "mean_tokens") >= 8 &&
                  csv_num(&c, nv, "mean_tokens") <= 64 && csv_num(&c, nv, "padding") == 0);
        free(c.text);
    }
    {
        size_t len;
        char *t = slurp("out.json", &len);
        GPT_CHECK(strstr(t, "\"lengths\":{\"spec\":\"uniform:8,64\",\"token_bytes\":64,"));
        GPT_CHECK(strstr(t, "\"packing\":[\"packed\",\"padded\",\"padmax\"]"));
        GPT_EQ(count(t, "\"packing\":\""), 3);
        GPT_EQ(count(t, "\"tokens_per_s\":"), 3 + 1); /* the points and the naive baseline */
        free(t);
    }

    /* A token budget: packed batches close on bytes (256 tokens of items of 8..64 tokens);
       padmax batches hold 256 / 64 = 4 items. A budget below the longest item is refused. */
    snprintf(args, sizeof args,
             "--backend host --lengths uniform:8,64 --token-bytes 64 --max-batch-tokens 256 "
             "--packing packed,padmax --batch 32 --duration 0.05 --warmup 0.02 --baseline none "
             "--csv '%s/out.csv' -q",
             dir);
    GPT_EQ(run(args, &out, &err), 0);
    free(out);
    free(err);
    check_csv(2, 0);
    {
        csv c;
        csv_load(&c);
        int pk = csv_row(&c, "packed"), pm = csv_row(&c, "padmax");
        GPT_CHECK(pk >= 0 && pm >= 0);
        double pk_batch = csv_num(&c, pk, "mean_batch");
        GPT_CHECK(pk_batch >= 1 && pk_batch * csv_num(&c, pk, "mean_tokens") <= 256 * 1.1);
        GPT_CHECK(csv_num(&c, pm, "mean_batch") <= 4);
        free(c.text);
    }
    GPT_EQ(run("--backend host --lengths uniform:8,64 --max-batch-tokens 32 --batch 4", &out, &err),
           2); /* options that do not go together: a usage error, before any point */
    GPT_CHECK(strstr(err, "--max-batch-tokens 32: below the longest item (64 tokens)") != NULL);
    free(out);
    free(err);

    /* A variable-length model: items from the length distribution, packed and padmax (its
       default). */
    char model[512];
    snprintf(model, sizeof model, "%s/varlen.safetensors", dir);
    write_varlen_model(model);
    snprintf(args, sizeof args,
             "--backend host --workload '%s' --lengths uniform:4,40 --batch 4 --duration 0.1 "
             "--warmup 0.03 --bound-duration 0.03 --csv '%s/out.csv' -q",
             model, dir);
    GPT_EQ(run(args, &out, &err), 0);
    GPT_CHECK(strstr(out, "f32[*x8] -> f32[4]") != NULL);
    GPT_EQ(check_table(out, 1, verdicts_seen, sizeof verdicts_seen), 2);
    GPT_CHECK(strstr(out, "n/a[") == NULL);
    /* Its CPU compute's bound: the model's own CPU time per batch in the one-slot run. */
    GPT_CHECK(strstr(out, "thread CPU time per batch in that one-slot run") != NULL);
    free(out);
    free(err);
    check_csv(2, 1);
    {
        csv c;
        csv_load(&c);
        int pk = csv_row(&c, "packed"), pm = csv_row(&c, "padmax");
        GPT_CHECK(pk >= 0 && pm >= 0 && csv_row(&c, "padded") < 0);
        GPT_CHECK(csv_num(&c, pk, "mean_tokens") >= 4 && csv_num(&c, pk, "mean_tokens") <= 40);
        GPT_CHECK(csv_num(&c, pk, "padding") == 0);
        GPT_CHECK(near(csv_num(&c, pm, "computed_tokens"), 40, 1e-9));
        GPT_CHECK(near(csv_num(&c, pm, "h2d_bytes_per_item"), 40 * 8 * 4, 1e-9));
        free(c.text);
    }
    /* A model computes packed: no padded mode; token options need a variable-length input. */
    snprintf(args, sizeof args, "--backend host --workload '%s' --packing padded", model);
    GPT_CHECK(run(args, &out, &err) == 2);
    GPT_CHECK(strstr(err, "only the synthetic compute can pad") != NULL);
    free(out);
    free(err);
    GPT_CHECK(run("--backend host --workload mlp --lengths uniform:1,4", &out, &err) == 2);
    GPT_CHECK(strstr(err, "is fixed-size") != NULL);
    free(out);
    free(err);
    /* The demo encoder (token ids): runs once the library has it; until then the library's own
       message. */
    rc = run("--backend host --workload encoder --lengths uniform:4,16 --batch 2 --duration 0.05 "
             "--warmup 0 --baseline none -q",
             &out, &err);
    GPT_CHECK(rc == 0 || (rc == 1 && strstr(err, "unknown demo model 'encoder'") != NULL));
    free(out);
    free(err);
    /* Lengths past the model's position table: refused at once (they overran the naive loop's
       buffer, or stalled the producers); without --lengths the default shrinks to it. */
    snprintf(model, sizeof model, "%s/short.safetensors", dir);
    write_short_positions_model(model);
    snprintf(args, sizeof args,
             "--backend host --workload '%s' --lengths uniform:4,40 --batch 2 --duration 0.05 "
             "--warmup 0 -q",
             model);
    GPT_EQ(run(args, &out, &err), 2); /* options the workload cannot take: a usage error */
    GPT_CHECK(strstr(err, "items of up to 40 tokens, but the model takes 1..16 per item") != NULL);
    free(out);
    free(err);
    snprintf(args, sizeof args,
             "--backend host --workload '%s' --vocab 30 --batch 2 --duration 0.05 --warmup 0 "
             "--baseline none -q",
             model);
    GPT_EQ(run(args, &out, &err), 0);
    GPT_CHECK(strstr(out, "lognormal:4.5,0.9,8,16") != NULL);
    GPT_CHECK(strstr(out, "token ids uniform in [0, 30)\n") != NULL);
    free(out);
    free(err);
    /* The ids: by default the model's whole vocabulary (30 rows; the default was 1000, and 97%
       of the items failed); a wider --vocab is refused at once. */
    snprintf(args, sizeof args,
             "--backend host --workload '%s' --batch 2 --duration 0.05 --warmup 0 -q", model);
    GPT_EQ(run(args, &out, &err), 0);
    GPT_CHECK(strstr(out, "token ids uniform in [0, 30) (the model's vocabulary)") != NULL);
    free(out);
    free(err);
    snprintf(args, sizeof args,
             "--backend host --workload '%s' --vocab 31 --batch 2 --duration 0.05 --warmup 0 -q",
             model);
    GPT_EQ(run(args, &out, &err), 2);
    GPT_CHECK(strstr(err, "--vocab 31: the model's embedding has 30 rows (ids 0..29)") != NULL);
    free(out);
    free(err);
    /* A bad --workload value is a usage error (2); a model file that does not load fails the
       run (1) with the file named. */
    GPT_EQ(run("--backend host --workload nothing --batch 2 -q", &out, &err), 2);
    GPT_CHECK(strstr(err, "--workload nothing: expected synthetic") != NULL);
    free(out);
    free(err);
    snprintf(args, sizeof args, "%s/empty.safetensors", dir);
    FILE *ef = fopen(args, "w");
    GPT_CHECK(ef && fclose(ef) == 0);
    snprintf(args, sizeof args,
             "--backend host --workload '%s/empty.safetensors' --batch 2 --duration 0.05 "
             "--warmup 0 -q",
             dir);
    GPT_EQ(run(args, &out, &err), 1);
    snprintf(args, sizeof args, "gp-bench: --workload %s/empty.safetensors: GP_E", dir);
    GPT_CHECK(strstr(err, args) != NULL);
    free(out);
    free(err);
    /* Outputs are whole or absent: stdout that cannot be written fails the run; a file whose
       write fails is removed (RLIMIT_FSIZE: a 2 KiB SVG cut short). */
    char cut_cmd[4096];
    snprintf(cut_cmd, sizeof cut_cmd,
             "'%s' --backend host --batch 2 --duration 0.05 --warmup 0 --baseline none -q "
             ">/dev/full 2>'%s/stderr.txt'; echo $? >'%s/rc.txt'",
             bench, dir, dir);
    GPT_CHECK(system(cut_cmd) != -1);
    char *full_err = slurp("stderr.txt", NULL), *full_rc = slurp("rc.txt", NULL);
    GPT_CHECK(strstr(full_err, "gp-bench: standard output: a write failed") != NULL);
    GPT_CHECK(strcmp(full_rc, "1\n") == 0);
    free(full_err);
    free(full_rc);
    snprintf(args, sizeof args, "%s/cut.svg", dir);
    unlink(args);
    snprintf(cut_cmd, sizeof cut_cmd,
             "(trap '' XFSZ; ulimit -f 2; '%s' --backend host --batch 2,4,8 --duration 0.05 "
             "--warmup 0 --baseline none -q --svg '%s/cut.svg' >/dev/null 2>'%s/stderr.txt'); "
             "echo $? >'%s/rc.txt'",
             bench, dir, dir, dir);
    GPT_CHECK(system(cut_cmd) != -1);
    snprintf(args, sizeof args, "%s/cut.svg", dir);
    struct stat cut_st;
    GPT_CHECK(stat(args, &cut_st) != 0); /* removed */
    char *cut_err = slurp("stderr.txt", NULL), *cut_rc = slurp("rc.txt", NULL);
    GPT_CHECK(strstr(cut_err, "--svg") && strstr(cut_err, "(the partial file was removed)"));
    GPT_CHECK(strcmp(cut_rc, "1\n") == 0);
    free(cut_err);
    free(cut_rc);

    /* AUTO: the verdict column is the report's first verdict (gpu-not-used when AUTO fell back,
       then the bottleneck is its own column). */
    rc = run("--batch 2 --duration 0.05 --warmup 0 --baseline none --report -q", &out, &err);
    if (rc == 0) {
        GPT_EQ(check_table(out, 0, verdicts_seen, sizeof verdicts_seen), 1);
        check_report_verdicts(out, verdicts_seen);
        if (strstr(out, "AUTO fell back")) GPT_CHECK(strstr(verdicts_seen, "gpu-not-used"));
    } else {
        GPT_CHECK(strstr(err, "gp-bench: ") != NULL); /* no usable backend: a clear error */
    }
    free(out);
    free(err);

    /* --backend cuda: runs with a usable GPU, otherwise a clear error, never a crash. */
    rc = run("--backend cuda --batch 1 --duration 0.05 --warmup 0 --baseline none -q", &out, &err);
    GPT_CHECK(rc == 0 || (rc == 1 && strstr(err, "gp-bench: ") != NULL));
    free(out);
    free(err);
    printf("gp-bench smoke: ok\n");
    return 0;
}

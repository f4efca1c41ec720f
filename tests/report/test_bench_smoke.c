/*
 * gp-bench smoke test: a tiny sweep on the host backend writes CSV, JSON and SVG that are well
 * formed, the table ends with the pipeline/naive and pipeline/bound ratios (a ratio above the
 * bound is flagged, a bound cell is never blank), its verdict column is the report's first
 * verdict, other arrivals and a demo model run (with the compute-alone bound), and bad flags
 * give the usage and a nonzero exit.
 * Usage: test_bench_smoke PATH/TO/gp-bench OUTPUT_DIR
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

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
    char cmd[4096];
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
    "callbacks", "small-batches", "enqueue",   "inflight", "mixed", "serial"};

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
        rows += !strcmp(field, "pipeline");
        naive += !strcmp(field, "naive");
        for (int k = 1; (field = strtok_r(NULL, ",", &fsave)); k++) {
            if (k == 17 || k == 23) { /* verdict, bottleneck */
                int known = 0;
                for (size_t v = 0; v < sizeof verdicts / sizeof verdicts[0]; v++)
                    known |= !strcmp(field, verdicts[v]);
                GPT_CHECK(known);
                continue;
            }
            char *end;
            double d = strtod(field, &end);
            GPT_CHECK(end != field && *end == '\0' && d >= 0);
        }
    }
    GPT_EQ(cols, 25);
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
    int x = (strstr(head, " inflight ") != NULL) + (strstr(head, " producers ") != NULL) +
            (strstr(head, " delay us ") != NULL);
    int rows = 0;
    verdicts_out[0] = '\0';
    while (*line == ' ' || (*line >= '0' && *line <= '9')) {
        char row[512];
        size_t n = strcspn(line, "\n");
        GPT_CHECK(n < sizeof row);
        memcpy(row, line, n);
        row[n] = '\0';
        char *save = NULL, *col[20];
        int nc = 0;
        for (char *c = strtok_r(row, " ", &save); c && nc < 20; c = strtok_r(NULL, " ", &save))
            col[nc++] = c;
        /* batch items/s p50 p95 p99 compute% h2d d2h enq mean verdict bottleneck [bound %] */
        GPT_CHECK(nc == x + (bound ? 14 : 12));
        snprintf(verdicts_out + strlen(verdicts_out), len - strlen(verdicts_out), "%s ",
                 col[x + 10]);
        if (bound && strncmp(col[x + 12], "n/a[", 4) == 0) { /* no bound: said why below */
            GPT_CHECK(strcmp(col[x + 13], "-") == 0 && strstr(out, ": no bound: ") != NULL);
        } else if (bound) {
            char *end;
            double pct = strtod(col[x + 13], &end);
            GPT_CHECK(end != col[x + 13] && *end == '%');
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

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 3) {
        fprintf(stderr, "usage: test_bench_smoke GP_BENCH OUTPUT_DIR\n");
        return 2;
    }
    bench = argv[1];
    dir = argv[2];
    mkdir(dir, 0755);
    char *out, *err, args[1024];

    /* Bad flags: usage, nonzero exit, no crash. */
    const char *bad[] = {"--bogus",       "--batch 0",  "--batch 1,x",     "--arrival rate=-3",
                         "--backend gpu", "--duration", "--baseline fast", "extra"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run(bad[i], &out, &err);
        GPT_CHECK(rc > 0);
        GPT_CHECK(strstr(err, "usage: gp-bench") != NULL);
        free(out);
        free(err);
    }
    GPT_EQ(run("--help", &out, &err), 0);
    GPT_CHECK(strstr(out, "--arrival") != NULL);
    free(out);
    free(err);

    /* A tiny sweep with both baselines and every output. */
    snprintf(args, sizeof args,
             "--backend host --batch 1,4 --duration 0.1 --warmup 0.05 --bound-duration 0.05 "
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
       of CPU compute: the compute alone on 1 and 2 threads. */
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
        GPT_CHECK(strstr(out, "compute called directly on") != NULL);
    }
    free(out);
    free(err);

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

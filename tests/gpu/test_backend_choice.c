/*
 * Backend choice without a device (these run everywhere, also in builds without CUDA):
 *   nodev     backend CUDA, no visible device (ctest sets CUDA_VISIBLE_DEVICES=-1):
 *             GP_ENODEV with the reason, nothing created.
 *   range     backend CUDA, device id 1000: GP_ENODEV; the reason names the id when a
 *             driver is there, else why there is no device at all.
 *   fallback  backend AUTO, no visible device: runs on the host, and says so in stats
 *             (fell_back, fallback_reason) and through the log callback.
 *   auto      backend AUTO where a device is usable: CUDA, no fallback (skipped elsewhere).
 */
#include <pthread.h>

#include "gpu_util.h"

typedef struct log_seen {
    pthread_mutex_t mu;
    int warns, errors;
    char last[512], last_error[512];
} log_seen;

static void on_log(void *user, gp_log_level level, const char *msg) {
    log_seen *l = user;
    pthread_mutex_lock(&l->mu);
    if (level == GP_LOG_WARN) {
        l->warns++;
        snprintf(l->last, sizeof l->last, "%s", msg);
    } else if (level == GP_LOG_ERROR) {
        l->errors++;
        snprintf(l->last_error, sizeof l->last_error, "%s", msg);
    }
    pthread_mutex_unlock(&l->mu);
}

static void base_config(gp_config *c, gp_backend b) {
    gpt_config(c, b);
    c->item_in_bytes = c->item_out_bytes = 64;
    c->max_batch = 8;
    c->compute = gpt_transform;
}

static int has(const char *s, const char *what) {
    return strstr(s, what) != NULL;
}

static int nodev(void) {
    gp_config c;
    base_config(&c, GP_BACKEND_CUDA);
    gp_pipeline *p = (gp_pipeline *)&c; /* must be reset to NULL */
    char err[512];
    int rc = gp_pipeline_create(&c, &p, err, sizeof err);
    printf("create(cuda) without a device: %s: %s\n", gp_err_name(rc), err);
    GPT_RC(rc, GP_ENODEV);
    GPT_CHECK(p == NULL);
    GPT_CHECK(err[0] != '\0');
    /* The reason says what is missing: no CUDA in this build, no driver, a driver too old,
       or no visible device; with the native CUDA error name when the runtime answered. */
    GPT_CHECK(has(err, "no CUDA backend") || has(err, "driver") || has(err, "no CUDA device"));
    GPT_CHECK(has(err, "no CUDA backend") || has(err, "cudaError"));
    return 0;
}

static int range(void) {
    gp_config c;
    base_config(&c, GP_BACKEND_CUDA);
    gp_pipeline *p = NULL;
    char err[512];
    /* Is any device usable? Then id 1000 must be refused for being out of range. */
    int usable = gp_pipeline_create(&c, &p, err, sizeof err) == GP_OK;
    gp_pipeline_destroy(p, GP_DESTROY_DRAIN);
    c.devices[0] = 1000;
    c.num_devices = 1;
    int rc = gp_pipeline_create(&c, &p, err, sizeof err);
    printf("create(cuda, device 1000): %s: %s\n", gp_err_name(rc), err);
    GPT_RC(rc, GP_ENODEV);
    GPT_CHECK(p == NULL);
    if (usable)
        GPT_CHECK(has(err, "1000") && has(err, "out of range"));
    else
        GPT_CHECK(err[0] != '\0');
    return 0;
}

static int fallback(void) {
    log_seen seen = {.warns = 0};
    GPT_CHECK(pthread_mutex_init(&seen.mu, NULL) == 0);
    gp_config c;
    base_config(&c, GP_BACKEND_AUTO);
    c.log = on_log;
    c.log_user = &seen;
    gp_pipeline *p = gpt_create(&c);

    gp_stats s = gpu_stats(p);
    printf("auto: backend %s, fell_back %d, reason: %s\n", gp_backend_name(s.backend), s.fell_back,
           s.fallback_reason);
    GPT_EQ(s.backend, GP_BACKEND_HOST);
    GPT_EQ(s.fell_back, 1);
    GPT_CHECK(strlen(s.fallback_reason) > 10);
    pthread_mutex_lock(&seen.mu);
    printf("log: %d warning(s), last: %s\n", seen.warns, seen.last);
    GPT_CHECK(seen.warns >= 1 && has(seen.last, "host"));
    /* The CUDA backend's failure is the fallback reason, not an error: no ERROR line, and the
       pipeline's last error stays GP_OK (it was GP_ENODEV, "no NVIDIA driver", with an ERROR
       line, on every create on a machine without a GPU). */
    printf("log: %d error(s)%s%s\n", seen.errors, seen.errors ? ", last: " : "", seen.last_error);
    GPT_EQ(seen.errors, 0);
    pthread_mutex_unlock(&seen.mu);
    char detail[512];
    GPT_RC(gp_pipeline_last_error(p, detail, sizeof detail), GP_OK);
    GPT_CHECK(detail[0] == '\0');

    /* The report says it too, with the reason. */
    FILE *f = tmpfile();
    GPT_CHECK(f);
    GPT_RC(gp_pipeline_report(p, f), GP_OK);
    static char text[16384];
    rewind(f);
    size_t got = fread(text, 1, sizeof text - 1, f);
    text[got] = '\0';
    fclose(f);
    char head[41]; /* the reason's first 40 characters */
    memcpy(head, s.fallback_reason, sizeof head - 1);
    head[sizeof head - 1] = '\0';
    printf("report mentions the reason: %s\n", strstr(text, head) ? "yes" : "no");
    GPT_CHECK(strstr(text, head) != NULL);

    /* And it works, on the host. */
    enum { N = 100, WORDS = 16 };
    static gpu_item items[N];
    for (uint64_t i = 0; i < N; i++)
        GPT_RC(gpu_submit(p, items, i, WORDS), GP_OK);
    gpu_drain(p);
    for (int i = 0; i < N; i++) {
        GPT_EQ(atomic_load(&items[i].calls), 1);
        GPT_RC(atomic_load(&items[i].status), GP_OK);
        GPT_EQ(atomic_load(&items[i].out_ok), 1);
    }
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    pthread_mutex_destroy(&seen.mu);
    return 0;
}

static int auto_cuda(void) {
    gp_config c;
    base_config(&c, GP_BACKEND_CUDA);
    gp_pipeline *p = gpt_create(&c); /* skips (77, with the reason) without a device */
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    base_config(&c, GP_BACKEND_AUTO);
    p = gpt_create(&c);
    gp_stats s = gpu_stats(p);
    printf("auto with a device: backend %s, fell_back %d\n", gp_backend_name(s.backend),
           s.fell_back);
    GPT_EQ(s.backend, GP_BACKEND_CUDA);
    GPT_EQ(s.fell_back, 0);
    GPT_CHECK(s.fallback_reason[0] == '\0');
    GPT_RC(gp_pipeline_destroy(p, GP_DESTROY_DRAIN), GP_OK);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "nodev") == 0) return nodev();
    if (strcmp(mode, "range") == 0) return range();
    if (strcmp(mode, "fallback") == 0) return fallback();
    if (strcmp(mode, "auto") == 0) return auto_cuda();
    fprintf(stderr, "usage: %s nodev|range|fallback|auto\n", argv[0]);
    return 2;
}

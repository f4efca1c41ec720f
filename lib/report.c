/* Stats renderings (JSON, Prometheus) and the doctor's report. */
#include <inttypes.h>
#include <stdio.h>

#include "pipeline.h"

int gp_pipeline_stats_json(gp_pipeline *p, FILE *f)
{
    gp_stats s = {.struct_size = sizeof s};
    if (!p || !f || gp_pipeline_stats(p, &s) != GP_OK)
        return GP_EINVAL;
    int k = fprintf(f,
                    "{\"backend\":\"%s\",\"fell_back\":%d,\"wall_ns\":%" PRIu64
                    ",\"submitted\":%" PRIu64 ",\"completed\":%" PRIu64 ",\"completed_ok\":%" PRIu64
                    ",\"batches\":%" PRIu64 ",\"batch_items\":%" PRIu64 ",\"compute_busy_ns\":%" PRIu64
                    ",\"h2d_busy_ns\":%" PRIu64 ",\"d2h_busy_ns\":%" PRIu64 ",\"latency_p50_ns\":%" PRIu64
                    ",\"latency_p99_ns\":%" PRIu64 "}\n",
                    gp_backend_name(s.backend), s.fell_back, s.wall_ns, s.submitted, s.completed,
                    s.completed_ok, s.batches, s.batch_items, s.compute_busy_ns, s.h2d_busy_ns,
                    s.d2h_busy_ns, s.latency_p50, s.latency_p99);
    return k < 0 ? GP_EIO : GP_OK;
}

int gp_pipeline_stats_prometheus(gp_pipeline *p, FILE *f)
{
    gp_stats s = {.struct_size = sizeof s};
    if (!p || !f || gp_pipeline_stats(p, &s) != GP_OK)
        return GP_EINVAL;
    int k = fprintf(f,
                    "# TYPE gpupipe_items_completed_total counter\n"
                    "gpupipe_items_completed_total %" PRIu64 "\n"
                    "# TYPE gpupipe_batches_total counter\n"
                    "gpupipe_batches_total %" PRIu64 "\n",
                    s.completed, s.batches);
    return k < 0 ? GP_EIO : GP_OK;
}

int gp_pipeline_report(gp_pipeline *p, FILE *f)
{
    gp_stats s = {.struct_size = sizeof s};
    if (!p || !f || gp_pipeline_stats(p, &s) != GP_OK)
        return GP_EINVAL;
    double wall = s.wall_ns ? (double)s.wall_ns : 1.0;
    int k = fprintf(f, "gpupipe report: backend %s%s, %" PRIu64 " items in %" PRIu64
                       " batches, compute busy %.1f%%\n",
                    gp_backend_name(s.backend), s.fell_back ? " (fell back)" : "", s.completed,
                    s.batches, 100.0 * (double)s.compute_busy_ns / wall);
    return k < 0 ? GP_EIO : GP_OK;
}

/* Number formatting for people, shared by the doctor (doctor.c) and the report (render.c). */
#ifndef GP_LIB_FMT_H
#define GP_LIB_FMT_H

#include <stdio.h>

typedef struct gp__fmtbuf {
    char s[24];
} gp__fmtbuf;

/* "850 ns", "12.5 us", "3.20 ms", "1.04 s" */
static inline gp__fmtbuf gp__fmt_ns(double ns) {
    gp__fmtbuf b;
    if (ns < 1e3)
        snprintf(b.s, sizeof b.s, "%.0f ns", ns);
    else if (ns < 1e6)
        snprintf(b.s, sizeof b.s, "%.*f us", ns < 1e4 ? 2 : ns < 1e5 ? 1 : 0, ns / 1e3);
    else if (ns < 1e9)
        snprintf(b.s, sizeof b.s, "%.*f ms", ns < 1e7 ? 2 : ns < 1e8 ? 1 : 0, ns / 1e6);
    else
        snprintf(b.s, sizeof b.s, "%.2f s", ns / 1e9);
    return b;
}

/* "950", "2.08k", "1.25M", "3.00G" */
static inline gp__fmtbuf gp__fmt_count(double v) {
    gp__fmtbuf b;
    if (v < 1e3)
        snprintf(b.s, sizeof b.s, "%.0f", v);
    else if (v < 1e6)
        snprintf(b.s, sizeof b.s, "%.*fk", v < 1e4 ? 2 : v < 1e5 ? 1 : 0, v / 1e3);
    else if (v < 1e9)
        snprintf(b.s, sizeof b.s, "%.*fM", v < 1e7 ? 2 : v < 1e8 ? 1 : 0, v / 1e6);
    else
        snprintf(b.s, sizeof b.s, "%.2fG", v / 1e9);
    return b;
}

/* "40 B", "3.0 KiB", "12.5 MiB", "1.2 GiB" */
static inline gp__fmtbuf gp__fmt_bytes(double v) {
    gp__fmtbuf b;
    if (v < 1024)
        snprintf(b.s, sizeof b.s, "%.0f B", v);
    else if (v < 1024.0 * 1024)
        snprintf(b.s, sizeof b.s, "%.1f KiB", v / 1024);
    else if (v < 1024.0 * 1024 * 1024)
        snprintf(b.s, sizeof b.s, "%.1f MiB", v / (1024.0 * 1024));
    else
        snprintf(b.s, sizeof b.s, "%.1f GiB", v / (1024.0 * 1024 * 1024));
    return b;
}

static inline double gp__pct(double f) {
    return 100.0 * f;
}

#endif

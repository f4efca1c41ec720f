/* Number formatting for people, shared by the doctor (doctor.c) and the report (render.c). */
#ifndef GP_LIB_FMT_H
#define GP_LIB_FMT_H

#include <stdio.h>

typedef struct gp__fmtbuf {
    char s[24];
} gp__fmtbuf;

/* v in steps of 1000 with 3 significant digits (more above 999 of the last unit): unit[k]
   after v / 1000^k (k = 0..3). */
static inline gp__fmtbuf gp__fmt_si(double v, const char *const unit[4]) {
    gp__fmtbuf b;
    int k = 0;
    while (k < 3 && v >= 1e3) {
        v /= 1e3;
        k++;
    }
    if (k == 3 && v >= 1e5) { /* absurd values stay short and keep their unit: "1.84e+10 s" */
        snprintf(b.s, sizeof b.s, "%.2e%s", v, unit[k]);
        return b;
    }
    snprintf(b.s, sizeof b.s, "%.*f%s", k == 0 ? 0 : v < 10 ? 2 : v < 100 ? 1 : 0, v, unit[k]);
    return b;
}

/* "850 ns", "12.5 us", "3.20 ms", "1.04 s" */
static inline gp__fmtbuf gp__fmt_ns(double ns) {
    static const char *const unit[4] = {" ns", " us", " ms", " s"};
    return gp__fmt_si(ns, unit);
}

/* "950", "2.08k", "1.25M", "3.00G" */
static inline gp__fmtbuf gp__fmt_count(double v) {
    static const char *const unit[4] = {"", "k", "M", "G"};
    return gp__fmt_si(v, unit);
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

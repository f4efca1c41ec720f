/*
 * notify: an event count. A waiter sleeps on a condition variable only after announcing
 * itself; a waker pays one fence and one relaxed load when nobody waits, which is the
 * common case on the hot paths (publish, release).
 *
 * Waiter:                                 Waker:
 *   gp__notify_lock(n)                      change state (atomic store, release)
 *   while (!condition)                      gp__notify_wake(n)
 *       gp__notify_wait(n, deadline)
 *   gp__notify_unlock(n)
 *
 * The waiter holds the mutex from the check to the wait, and a waker that saw a waiter
 * takes the mutex before signalling, so no wake-up is lost between check and wait.
 */
#ifndef GP_LIB_NOTIFY_H
#define GP_LIB_NOTIFY_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#if defined(__SANITIZE_THREAD__)
#define GP__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GP__TSAN 1
#endif
#endif

typedef struct gp__notify {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    _Atomic uint32_t waiters;
} gp__notify;

static inline int gp__notify_init(gp__notify *n) {
    pthread_condattr_t a;
    int rc;
    atomic_init(&n->waiters, 0);
    if ((rc = pthread_mutex_init(&n->mu, NULL)) != 0) return rc;
    if ((rc = pthread_condattr_init(&a)) != 0) goto fail_mu;
    if ((rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC)) != 0 ||
        (rc = pthread_cond_init(&n->cv, &a)) != 0) {
        pthread_condattr_destroy(&a);
        goto fail_mu;
    }
    pthread_condattr_destroy(&a);
    return 0;
fail_mu:
    pthread_mutex_destroy(&n->mu);
    return rc;
}

static inline void gp__notify_fini(gp__notify *n) {
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
}

/* Lock and announce a waiter. The seq_cst fence orders the announcement before the
   caller's re-check of its condition; it pairs with the fence in gp__notify_wake. */
static inline void gp__notify_lock(gp__notify *n) {
    pthread_mutex_lock(&n->mu);
#ifdef GP__TSAN
    atomic_fetch_add_explicit(&n->waiters, 1, memory_order_seq_cst);
#else
    atomic_fetch_add_explicit(&n->waiters, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
#endif
}

static inline void gp__notify_unlock(gp__notify *n) {
    atomic_fetch_sub_explicit(&n->waiters, 1, memory_order_relaxed);
    pthread_mutex_unlock(&n->mu);
}

/* Wait until woken or until `deadline_ns` on CLOCK_MONOTONIC (0 = no deadline). Spurious
   returns are allowed; the caller re-checks. */
static inline void gp__notify_wait(gp__notify *n, uint64_t deadline_ns) {
    if (deadline_ns == 0) {
        pthread_cond_wait(&n->cv, &n->mu);
    } else {
        struct timespec ts = {(time_t)(deadline_ns / 1000000000u),
                              (long)(deadline_ns % 1000000000u)};
        pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    }
}

/* Wake every waiter, if any. Call after the state change it announces. */
static inline void gp__notify_wake(gp__notify *n) {
#ifdef GP__TSAN
    /* ThreadSanitizer does not model fences: the same ordering through a seq_cst RMW, whose
       release sequence carries the state change to the waiter's RMW. Costlier (the line is
       written), so only in TSan builds. */
    if (atomic_fetch_add_explicit(&n->waiters, 0, memory_order_seq_cst) != 0) {
#else
    atomic_thread_fence(memory_order_seq_cst); /* state change before the waiters load */
    if (atomic_load_explicit(&n->waiters, memory_order_relaxed) != 0) {
#endif
        pthread_mutex_lock(&n->mu);
        pthread_cond_broadcast(&n->cv);
        pthread_mutex_unlock(&n->mu);
    }
}

#endif

/*
 * failalloc: a preloaded (LD_PRELOAD) stand-in for the C allocator and pthread_create, for the
 * allocation-failure sweep (tests/core/test_alloc_fail.c, docs/DESIGN.md §11). Between
 * gpfail_arm(n) and gpfail_disarm() it counts every malloc, calloc, realloc, posix_memalign,
 * aligned_alloc, memalign and pthread_create of the process, fails the n-th (NULL / ENOMEM,
 * EAGAIN for a thread) and keeps each block allocated in the window until it is freed, so the
 * test can ask what the window left allocated. The allocation itself is glibc's
 * (__libc_malloc and friends); outside a window this adds one load per call.
 * Not for sanitizer builds: ASan and TSan replace the allocator themselves.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

#define API __attribute__((visibility("default")))

void gpfail_arm(long n);
long gpfail_disarm(long *calls, const char **failed);
long gpfail_calls(void);

static _Atomic int armed;
static _Atomic long fail_at, seen;
static const char *_Atomic failed_call;

/* Blocks allocated in the window and not freed yet: an open-addressing set of pointers. */
#define SET_BITS 18
#define SET_SIZE (1u << SET_BITS)
static void *set[SET_SIZE];
static long live, overflow;
static atomic_flag set_lock = ATOMIC_FLAG_INIT;
static void *const TOMB = (void *)1;

static void lock(void) {
    while (atomic_flag_test_and_set_explicit(&set_lock, memory_order_acquire))
        ;
}
static void unlock(void) {
    atomic_flag_clear_explicit(&set_lock, memory_order_release);
}

static size_t slot_of(const void *p) {
    uint64_t h = (uint64_t)(uintptr_t)p * UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(h >> (64 - SET_BITS));
}

static void remember(void *p) {
    if (!p || !atomic_load_explicit(&armed, memory_order_relaxed)) return;
    lock();
    size_t i = slot_of(p);
    for (size_t k = 0; k < SET_SIZE; k++, i = (i + 1) & (SET_SIZE - 1))
        if (set[i] == NULL || set[i] == TOMB) {
            set[i] = p;
            live++;
            unlock();
            return;
        }
    overflow++;
    unlock();
}

static void forget(void *p) {
    if (!p) return;
    lock();
    if (live) {
        size_t i = slot_of(p);
        for (size_t k = 0; k < SET_SIZE && set[i]; k++, i = (i + 1) & (SET_SIZE - 1))
            if (set[i] == p) {
                set[i] = TOMB;
                live--;
                break;
            }
    }
    unlock();
}

static __thread int in_thread_create; /* inside pthread_create: its own allocations */

/* 1: this call is the armed one and must fail. An allocation pthread_create makes for the new
   thread (its TLS) is named as that: the caller sees a pthread_create failure. */
static int fail_now(const char *call) {
    if (!atomic_load_explicit(&armed, memory_order_relaxed)) return 0;
    long k = atomic_fetch_add(&seen, 1) + 1;
    if (k != atomic_load(&fail_at)) return 0;
    atomic_store(&failed_call, in_thread_create ? "pthread_create (its allocation)" : call);
    return 1;
}

/* Start a window: the n-th counted call fails (n = 0: none does); nothing is remembered from
   before. */
API void gpfail_arm(long n) {
    lock();
    memset(set, 0, sizeof set);
    live = overflow = 0;
    unlock();
    atomic_store(&failed_call, NULL);
    atomic_store(&seen, 0);
    atomic_store(&fail_at, n);
    atomic_store(&armed, 1);
}

/* End the window: the blocks it left allocated (-1 if there were too many to track); `calls`
   the calls it counted, `failed` the one that failed (NULL if none did). */
API long gpfail_disarm(long *calls, const char **failed) {
    atomic_store(&armed, 0);
    if (calls) *calls = atomic_load(&seen);
    if (failed) *failed = atomic_load(&failed_call);
    lock();
    long n = overflow ? -1 : live;
    unlock();
    return n;
}

/* The calls counted so far in this window. */
API long gpfail_calls(void) {
    return atomic_load(&seen);
}

API void *malloc(size_t n) {
    if (fail_now("malloc")) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = __libc_malloc(n);
    remember(p);
    return p;
}

API void *calloc(size_t a, size_t b) {
    if (fail_now("calloc")) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = __libc_calloc(a, b);
    remember(p);
    return p;
}

API void *realloc(void *old, size_t n) {
    if (old && n == 0) { /* a free */
        forget(old);
        return __libc_realloc(old, 0);
    }
    if (fail_now("realloc")) {
        errno = ENOMEM;
        return NULL; /* `old` stays allocated, as with a real failure */
    }
    void *p = __libc_realloc(old, n);
    if (p) {
        forget(old);
        remember(p);
    }
    return p;
}

API void free(void *p) {
    forget(p);
    __libc_free(p);
}

API void *memalign(size_t align, size_t n) {
    if (fail_now("memalign")) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = __libc_memalign(align, n);
    remember(p);
    return p;
}

API void *aligned_alloc(size_t align, size_t n) {
    if (fail_now("aligned_alloc")) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = __libc_memalign(align, n);
    remember(p);
    return p;
}

API int posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1))) return EINVAL;
    if (fail_now("posix_memalign")) return ENOMEM;
    void *p = __libc_memalign(align, n);
    if (!p) return ENOMEM;
    remember(p);
    *out = p;
    return 0;
}

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

API int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    static create_fn real;
    if (!real) real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
    if (fail_now("pthread_create")) return EAGAIN;
    in_thread_create = 1;
    int rc = real ? real(t, attr, fn, arg) : EAGAIN;
    in_thread_create = 0;
    return rc;
}

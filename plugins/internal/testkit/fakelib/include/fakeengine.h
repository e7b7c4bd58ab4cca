/*
 * fakeengine.h - the asynchronous copy engine of the fake GPU drivers the
 * backend tests build (plugins/internal/testkit/fakelib): streams served by a
 * thread each, events as stream sequence numbers, and an optional paced
 * engine per device, so that a fill's overlap of reading and copying is
 * real and measurable without a GPU. Include it in exactly one C file.
 *
 * A copy enqueued on a stream is performed later by the stream's thread
 * (after <prefix>_COPY_DELAY_US microseconds), reading its source then, so
 * reusing a staging buffer before its event completed corrupts the result
 * as it would on hardware. With <prefix>_COPY_GBPS=<rate> (GB/s, 1e9
 * bytes, decimals allowed) the copies of all streams of a device share one
 * engine of that rate: each copy reserves the engine for n/rate seconds
 * after the copy before it, reads its source at the start of its slot and
 * completes (its stream advances, its events fire) at the end.
 */
#ifndef WCACHE_FAKEENGINE_H
#define WCACHE_FAKEENGINE_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FE_MAX_DEVICES 16

struct fe_op {
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
    struct fe_op *next;
};

struct fe_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct fe_op *head, *tail;
    uint64_t enq, done;
    int stop;
    int dev;
    int delay_us;
    double gbps;
    pthread_t thr;
};

static pthread_mutex_t fe_engine_mu = PTHREAD_MUTEX_INITIALIZER;
static double fe_engine_busy[FE_MAX_DEVICES]; /* CLOCK_MONOTONIC seconds */

static double fe_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fe_sleep_until(double t) {
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* fe_copy performs one host-to-device copy of device dev, paced by the
 * device's engine when gbps > 0. Slots follow each other in virtual time:
 * a thread that wakes late does not delay the slots after its own, so the
 * rate holds on average; memcpy slower than the rate bounds it too. */
static void fe_copy(int dev, double gbps, unsigned char *dst, const unsigned char *src, size_t n) {
    if (gbps <= 0 || dev < 0 || dev >= FE_MAX_DEVICES) {
        memcpy(dst, src, n);
        return;
    }
    pthread_mutex_lock(&fe_engine_mu);
    double now = fe_now();
    double start = fe_engine_busy[dev] > now ? fe_engine_busy[dev] : now;
    double end = start + (double)n / (gbps * 1e9);
    fe_engine_busy[dev] = end;
    pthread_mutex_unlock(&fe_engine_mu);
    fe_sleep_until(start);
    memcpy(dst, src, n);
    fe_sleep_until(end);
}

static void *fe_stream_main(void *arg) {
    struct fe_stream *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head && s->stop) break;
        struct fe_op *op = s->head;
        pthread_mutex_unlock(&s->mu);
        if (s->delay_us > 0) usleep((useconds_t)s->delay_us);
        fe_copy(s->dev, s->gbps, op->dst, op->src, op->n);
        pthread_mutex_lock(&s->mu);
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        s->done++;
        free(op);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* fe_stream_create starts a stream of device dev; NULL when no thread. */
static struct fe_stream *fe_stream_create(int dev, int delay_us, double gbps) {
    struct fe_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->dev = dev;
    s->delay_us = delay_us;
    s->gbps = gbps;
    if (pthread_create(&s->thr, NULL, fe_stream_main, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* fe_stream_enqueue queues a copy and returns its sequence number. */
static uint64_t fe_stream_enqueue(struct fe_stream *s, unsigned char *dst, const unsigned char *src, size_t n) {
    struct fe_op *op = calloc(1, sizeof *op);
    op->dst = dst;
    op->src = src;
    op->n = n;
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    uint64_t seq = ++s->enq;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return seq;
}

/* fe_stream_last returns the sequence number of the last queued copy. */
static uint64_t fe_stream_last(struct fe_stream *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t seq = s->enq;
    pthread_mutex_unlock(&s->mu);
    return seq;
}

/* fe_stream_pending reports whether copies are still queued. */
static int fe_stream_pending(struct fe_stream *s) {
    pthread_mutex_lock(&s->mu);
    int p = s->done < s->enq;
    pthread_mutex_unlock(&s->mu);
    return p;
}

/* fe_stream_wait blocks until copy seq has completed. */
static void fe_stream_wait(struct fe_stream *s, uint64_t seq) {
    pthread_mutex_lock(&s->mu);
    while (s->done < seq) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* fe_stream_destroy completes the queued copies and ends the thread. */
static void fe_stream_destroy(struct fe_stream *s) {
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thr, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

#endif

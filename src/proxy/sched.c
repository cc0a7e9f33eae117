/* The worker's flush schedule: dirty and lazy lists, the lazy timer, the flush loop. */
#include "config.h"

#include "proxy/sched.h"

void sched_init(struct sched *sc)
{
    queue_init(&sc->dirty_sconns);
    queue_init(&sc->dirty_clients);
    queue_init(&sc->lazy_sconns);
    sc->lazy_off = 0;
    sc->flush_sconn = NULL;
    sc->flush_client = NULL;
}

void sched_open(struct sched *sc, uv_loop_t *loop, sched_flush_cb flush_sconn,
                sched_flush_cb flush_client)
{
    uv_timer_init(loop, &sc->lazy_timer);
    sc->lazy_timer.data = sc;
    sc->flush_sconn = flush_sconn;
    sc->flush_client = flush_client;
}

void sched_close(struct sched *sc)
{
    uv_timer_stop(&sc->lazy_timer);
    uv_close((uv_handle_t *)&sc->lazy_timer, NULL);
}

void sched_flush(struct sched *sc)
{
    sched_flush_with(sc, sc->flush_sconn, sc->flush_client);
}

void sched_lazy_due(struct sched *sc)
{
    struct qnode *q;

    uv_timer_stop(&sc->lazy_timer);
    while ((q = queue_first(&sc->lazy_sconns)) != NULL) {
        struct sched_node *n = QUEUE_DATA(q, struct sched_node, lazy_link);
        queue_remove(q);
        n->lazy = 0;
        sched_mark_sconn(sc, n);
    }
}

void sched_lazy_off(struct sched *sc)
{
    sc->lazy_off = 1;
    sched_lazy_due(sc);
}

static void sched_lazy_cb(uv_timer_t *t)
{
    struct sched *sc = t->data;

    sched_lazy_due(sc);
    sched_flush(sc);            /* a timer's callback: the loop may sleep before its check */
}

void sched_mark_lazy(struct sched *sc, struct sched_node *n, uint32_t delay_ms)
{
    if (delay_ms == 0 || sc->lazy_off) {
        sched_mark_sconn(sc, n);
        return;
    }
    if (n->dirty || n->lazy)
        return;                 /* goes out this iteration, or with the batch already due */
    n->lazy = 1;
    queue_insert_tail(&sc->lazy_sconns, &n->lazy_link);
    if (!uv_is_active((uv_handle_t *)&sc->lazy_timer))
        uv_timer_start(&sc->lazy_timer, sched_lazy_cb, delay_ms, 0);
}

/* Counters, declared once: the X-macro lists below generate the structs, the JSON and Prometheus names and -D. */
#ifndef RL_STATS_H
#define RL_STATS_H

#include <stdint.h>

/* ACTION(name, type, description); type is COUNTER (only grows), GAUGE, or TIMESTAMP.
 * The first block is twemproxy's, field for field. */
#define STATS_POOL_CODEC(ACTION)                                                            \
    ACTION(client_eof,          COUNTER, "# eof on client connections")                   \
    ACTION(client_err,          COUNTER, "# errors on client connections")                \
    ACTION(client_connections,  GAUGE,   "# active client connections")                   \
    ACTION(server_ejects,       COUNTER, "# times backend server was ejected")            \
    ACTION(forward_error,       COUNTER, "# times we encountered a forwarding error")     \
    ACTION(fragments,           COUNTER, "# fragments created from a multi-vector request") \
    ACTION(requests,            COUNTER, "# requests from clients")                       \
    ACTION(local_replies,       COUNTER, "# requests answered by the proxy itself")       \
    ACTION(client_errors_sent,  COUNTER, "# protocol errors answered to clients")         \
    ACTION(crossslot,           COUNTER, "# multi-key requests refused: keys on different servers") \
    ACTION(client_paused,       COUNTER, "# times a client was paused for backpressure")  \
    ACTION(client_rejected,     COUNTER, "# connections refused over client_connections") \
    ACTION(hits,                COUNTER, "# memcached retrieval hits")                    \
    ACTION(misses,              COUNTER, "# memcached retrieval misses")                  \
    ACTION(failovers,           COUNTER, "# requests sent to a later server of the preference list") \
    ACTION(fail_open,           COUNTER, "# requests sent to a down server because most were down") \

#define STATS_SERVER_CODEC(ACTION)                                                          \
    ACTION(server_eof,          COUNTER, "# eof on server connections")                   \
    ACTION(server_err,          COUNTER, "# errors on server connections")                \
    ACTION(server_timedout,     COUNTER, "# timeouts on server connections")              \
    ACTION(server_connections,  GAUGE,   "# active server connections")                   \
    ACTION(server_ejected_at,   TIMESTAMP, "timestamp when server was ejected in usec since epoch") \
    ACTION(requests,            COUNTER, "# requests")                                    \
    ACTION(request_bytes,       COUNTER, "total request bytes")                           \
    ACTION(responses,           COUNTER, "# responses")                                   \
    ACTION(response_bytes,      COUNTER, "total response bytes")                          \
    ACTION(in_queue,            GAUGE,   "# requests in incoming queue")                  \
    ACTION(in_queue_bytes,      GAUGE,   "current request bytes in incoming queue")       \
    ACTION(out_queue,           GAUGE,   "# requests in outgoing queue")                  \
    ACTION(out_queue_bytes,     GAUGE,   "current request bytes in outgoing queue")       \
    ACTION(hits,                COUNTER, "# memcached retrieval hits")                    \
    ACTION(misses,              COUNTER, "# memcached retrieval misses")                  \
    ACTION(in_flight,           GAUGE,   "# requests sent and not yet answered")          \
    ACTION(spills,              COUNTER, "# requests placed here by bounded loads")       \

#define STATS_FIELD(name, type, desc) int64_t name;

struct stats_pool {
    STATS_POOL_CODEC(STATS_FIELD)
};

struct stats_server {
    STATS_SERVER_CODEC(STATS_FIELD)
};

#endif

/* Admin HTTP endpoint (libmicrohttpd, its own threads): the status page, /metrics, /stats, /health, /ring, /config, /reload. */
#ifndef RL_ADMIN_H
#define RL_ADMIN_H

#include <stddef.h>
#include <stdint.h>

struct buf;
struct admin;

/*
 * What the core supplies. Every callback runs on the admin thread (never a worker's), may
 * be called concurrently with the workers and must take care of that itself (read the
 * published ring snapshot, sum per-worker counters, post work to the main loop). Each
 * appends its body to out (empty on entry, owned by the admin module) and returns:
 *
 *   get_stats_json, get_metrics, config: 0, or negative errno -> 500;
 *   health: the HTTP status, 200 (serving) or 503 (not ready / draining);
 *   ring:   200 with the owner and preference list of key in pool as JSON, 404 with a
 *           one-line reason (unknown pool); pool is NUL-terminated, key has keylen bytes
 *           (it may hold any byte, NUL included);
 *   reload: the HTTP status: 200 applied, 400/422 invalid configuration (old one kept),
 *           409 a reload already running, 500 other failure; out says what happened.
 *
 * Any other return is answered as 500. A NULL callback answers 501.
 */
struct admin_ops {
    int (*get_stats_json)(void *ctx, struct buf *out);
    int (*get_metrics)(void *ctx, struct buf *out);
    int (*health)(void *ctx, struct buf *out);
    int (*ring)(void *ctx, const char *pool, const char *key, size_t keylen, struct buf *out);
    int (*config)(void *ctx, struct buf *out);
    int (*reload)(void *ctx, struct buf *out);
};

/*
 * Endpoints (HEAD is accepted wherever GET is):
 *   GET  /                        text/html                   the status page: draws /stats
 *   GET  /metrics                 text/plain; version=0.0.4   Prometheus exposition
 *   GET  /stats                   application/json            the stats-port document
 *   GET  /health                  text/plain                  200 or 503
 *   GET  /ring?pool=P&key=K       application/json            200, 404; 400 if P or K missing
 *   GET  /config                  application/json            the configuration in effect
 *   POST /reload                  text/plain                  needs "Authorization: Bearer
 *                                                             <token>" when a token is set
 * A known path with another method gets 405 and an Allow header, an unknown path 404, a bad
 * or missing token 401 (with WWW-Authenticate: Bearer). Error bodies are one line of text.
 *
 * Before any of that, for every path: a Host that is not an IP address, localhost or one of
 * the allowed names (admin_start's hosts; any port) gets 421, and so does an HTTP/1.1
 * request without Host (DNS rebinding); an Origin header that is not http(s):// such a host
 * gets 403. Without a token, a POST whose Content-Type is one an HTML form can send
 * (application/x-www-form-urlencoded, multipart/form-data, text/plain) gets 403 (cross-site
 * forms); curl -X POST sends none. docs/admin.md says why.
 */

/*
 * Listen on addr ("host:port", "[v6]:port", ":port" meaning 127.0.0.1; port 0 picks a free
 * one, see admin_port) and serve on libmicrohttpd's threads (a small pool: the callbacks
 * may run on two threads at once). token: NULL or "" for none (copied). hosts: names
 * allowed in Host besides IP addresses and localhost, separated by spaces, compared
 * without case (NULL or "" for none; copied). ops and ctx must outlive the server. Returns the server, or NULL with a reason
 * in err (errlen bytes, always NUL-terminated when errlen > 0).
 */
struct admin *admin_start(const char *addr, const char *token, const char *hosts,
                          const struct admin_ops *ops, void *ctx, char *err, size_t errlen);

/* The same on a listening socket already open (listen_fd >= 0; an upgrade's successor
 * takes its predecessor's): addr is still parsed, for the Host checks' sake. */
struct admin *admin_start_on(int listen_fd, const char *addr, const char *token,
                             const char *hosts, const struct admin_ops *ops, void *ctx,
                             char *err, size_t errlen);

/* The listening socket (still the server's), or -1. */
int  admin_listen_fd(const struct admin *a);

/* Stop accepting and close the listening socket (running connections are served until
 * admin_stop): the socket lives on in an upgrade's successor, which accepts from then on. */
void admin_quiesce(struct admin *a);

/* The TCP port actually bound. */
uint16_t admin_port(const struct admin *a);

/* Stop the thread, close the listener and connections (waits for running callbacks), free. */
void admin_stop(struct admin *a);

#endif

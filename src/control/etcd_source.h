/* config_source: etcd — the pools document read and watched from an etcd v3 key (HTTP/JSON gateway). */
#ifndef RL_CONTROL_ETCD_SOURCE_H
#define RL_CONTROL_ETCD_SOURCE_H

#include <stddef.h>

#include <jansson.h>

#include "conf/conf.h"

struct proxy;

/* A new document (or the key's deletion) was read: proxy.c installs what applies it (a
 * reload, which reads the document through etcd_source_conf_load). Main thread. */
typedef void (*etcd_source_changed_fn)(struct proxy *p);

/* The proxy's record (p->etcd); 0 or -ENOMEM. Nothing is asked until a file names a source. */
int  etcd_source_init(struct proxy *p, etcd_source_changed_fn changed);

/*
 * The configuration as the file says (main thread): the file alone, or with
 * `config_source:` the file's global section with the pools document last read from etcd.
 * The first time a source is named the document is read now (bounded). 0 and *out, or -1
 * with err (the file, the document, or etcd unreachable at start-up).
 */
int  etcd_source_conf_load(struct proxy *p, struct conf **out, char *err, size_t errlen);

/* On the main loop: the watch starts (a thread of its own) when the file has a source. */
void etcd_source_start(struct proxy *p);
void etcd_source_close(struct proxy *p);    /* the watch stops and is joined */
void etcd_source_free(struct proxy *p);

/* The source's state for /config ("config_source"): a new object, or NULL without one. */
json_t *etcd_source_json(struct proxy *p);

#endif

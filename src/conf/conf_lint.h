/* Warnings about a valid configuration: secrets in a file every user can read, an admin endpoint open off this host. */
#ifndef RL_CONF_LINT_H
#define RL_CONF_LINT_H

struct conf;

/* Called once per warning with a one-line message (no trailing newline). */
typedef void (*conf_warn_fn)(void *arg, const char *msg);

/*
 * Look at a loaded configuration (conf->path is the file it came from) and warn about:
 *   - a file every user of the host may read (mode o+r) that holds a secret: a pool's
 *     redis_auth or the admin_token;
 *   - an admin endpoint on an address other than loopback without an admin_token: POST
 *     /reload answers anyone who reaches it.
 * Neither stops the proxy (both may be deliberate). Returns the number of warnings.
 */
int  conf_lint(const struct conf *conf, conf_warn_fn warn, void *arg);

/* conf_lint into the log at warning level (start and reload). */
void conf_lint_log(const struct conf *conf);

#endif

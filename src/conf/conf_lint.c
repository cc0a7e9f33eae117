/* Warnings about a valid configuration: secrets in a file every user can read, an admin endpoint open off this host. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "conf/conf.h"
#include "conf/conf_lint.h"
#include "lib/log.h"

/* A host the admin endpoint may listen on without being reachable from elsewhere. Names
 * are not resolved (loading stays pure): only "localhost" counts among them. */
static int conf_lint_loopback(const char *host)
{
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0 ||
           strcmp(host, "localhost") == 0;
}

/* "redis_auth of pool 'a', admin_token" for the secrets the file holds (the first three
 * pools named, the others counted); 0 when it holds none. */
static int conf_lint_secrets(const struct conf *conf, char *out, size_t outlen)
{
    unsigned with_auth = 0;
    size_t used = 0;

    out[0] = '\0';
    for (unsigned i = 0; i < conf->npools; i++) {
        if (conf->pools[i].redis_auth == NULL)
            continue;
        if (with_auth < 3 && used < outlen)
            used += (size_t)snprintf(out + used, outlen - used, "%sredis_auth of pool '%s'",
                                     with_auth ? ", " : "", conf->pools[i].name);
        with_auth++;
    }
    if (with_auth > 3 && used < outlen)
        used += (size_t)snprintf(out + used, outlen - used, " and %u more pools", with_auth - 3);
    if (conf->global.admin_token != NULL && used < outlen)
        snprintf(out + used, outlen - used, "%sadmin_token", with_auth ? ", " : "");
    return with_auth > 0 || conf->global.admin_token != NULL;
}

int conf_lint(const struct conf *conf, conf_warn_fn warn, void *arg)
{
    char msg[1024], secrets[512];
    struct stat st;
    int n = 0;

    if (conf->path != NULL && conf_lint_secrets(conf, secrets, sizeof(secrets)) &&
        stat(conf->path, &st) == 0 && (st.st_mode & S_IROTH)) {
        snprintf(msg, sizeof(msg), "%s is readable by every user of this host (mode %04o) and "
                 "holds %s: make it readable by the proxy alone (chmod o-r, see "
                 "docs/operations.md)", conf->path, (unsigned)(st.st_mode & 07777), secrets);
        warn(arg, msg);
        n++;
    }
    const struct conf_addr *a = &conf->global.admin_listen;
    if (a->text != NULL && a->host != NULL && !conf_lint_loopback(a->host) &&
        conf->global.admin_token == NULL) {
        snprintf(msg, sizeof(msg), "the admin endpoint listens on %s, off this host, without "
                 "an admin_token: anyone who reaches it can POST /reload; set ringleader: "
                 "admin_token, or listen on 127.0.0.1", a->text);
        warn(arg, msg);
        n++;
    }
    return n;
}

static void conf_lint_to_log(void *arg, const char *msg)
{
    (void)arg;
    log_warn("configuration: %s", msg);
}

void conf_lint_log(const struct conf *conf)
{
    conf_lint(conf, conf_lint_to_log, NULL);
}

/* ringleader: command line (nutcracker's flags plus --workers); -t, -d and the pid file around proxy_run. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"
#include "conf/conf_lint.h"
#include "control/daemon.h"
#include "lib/log.h"
#include "control/proxy.h"
#include "control/upgrade.h"
#include "proxy/tls.h"
#include "stats/stats.h"
#include "state/rejoin_journal.h"

#define RL_DEFAULT_CONF "conf/ringleader.yml"
/* --upgrade waits this long for the successor to serve: a start, with its own checks, and
 * the handoff; a bound against a hang, not a pace. */
#define RL_UPGRADE_WAIT_MS 120000

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: ringleader [-?hVdDt] [-v verbosity level] [-o output file]\n"
            "                  [-c conf file] [-s stats port] [-a stats addr]\n"
            "                  [-i stats interval] [-p pid file] [-m mbuf size] [--workers N]\n"
            "                  [--upgrade-socket path] [--upgrade-from path] [--upgrade path]\n"
            "\n"
            "Options:\n"
            "  -h, --help             : this help\n"
            "  -V, --version          : show version and exit\n"
            "  -t, --test-conf        : test configuration for syntax errors and exit\n"
            "  -d, --daemonize        : run as a daemon\n"
            "  -D, --describe-stats   : print stats description and exit\n"
            "  -v, --verbose=N        : set logging level (default: %d, min: 0, max: 11)\n"
            "  -o, --output=S         : set logging file (default: stderr)\n"
            "  -c, --conf-file=S      : set configuration file (default: %s)\n"
            "  -s, --stats-port=N     : set stats monitoring port (default: 22222)\n"
            "  -a, --stats-addr=S     : set stats monitoring ip (default: 127.0.0.1)\n"
            "  -i, --stats-interval=N : accepted for compatibility (stats are summed on every read)\n"
            "  -p, --pid-file=S       : set pid file (default: off)\n"
            "  -m, --mbuf-size=N      : set the size of each client read in bytes (default: 16384;\n"
            "                           buffers grow past it for large requests)\n"
            "      --workers=N        : worker threads, each with its own event loop (default: one per CPU)\n"
            "      --upgrade-socket=S : unix socket where a new binary takes over the listeners\n"
            "                           (default: off; docs/upgrade.md)\n"
            "      --upgrade-from=S   : take over the listeners of the process on upgrade socket S,\n"
            "                           which drains and exits once this one serves\n"
            "      --upgrade=S        : ask the process on upgrade socket S to start the binary at\n"
            "                           its path with its options as its successor; wait, say how\n"
            "                           it went (exit 0: the successor serves)\n",
            LOG_NOTICE_, RL_DEFAULT_CONF);
}

static void print_warning(void *arg, const char *msg)
{
    (void)arg;
    fprintf(stderr, "ringleader: warning: %s\n", msg);
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *s == '\0' || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"test-conf", no_argument, NULL, 't'},
        {"daemonize", no_argument, NULL, 'd'},
        {"describe-stats", no_argument, NULL, 'D'},
        {"verbose", required_argument, NULL, 'v'},
        {"output", required_argument, NULL, 'o'},
        {"conf-file", required_argument, NULL, 'c'},
        {"stats-port", required_argument, NULL, 's'},
        {"stats-interval", required_argument, NULL, 'i'},
        {"stats-addr", required_argument, NULL, 'a'},
        {"pid-file", required_argument, NULL, 'p'},
        {"mbuf-size", required_argument, NULL, 'm'},
        {"workers", required_argument, NULL, 'W'},
        {"upgrade-socket", required_argument, NULL, 'U'},
        {"upgrade-from", required_argument, NULL, 'F'},
        {"upgrade", required_argument, NULL, 'u'},
        {NULL, 0, NULL, 0},
    };
    struct proxy_options opt;
    int test_conf = 0, daemon = 0;
    long level = LOG_NOTICE_, v;
    const char *logfile = NULL, *pidfile = NULL, *upgrade = NULL;

    memset(&opt, 0, sizeof(opt));
    opt.conf_path = RL_DEFAULT_CONF;
    opt.verbosity = -1;
    int c;
    while ((c = getopt_long(argc, argv, "hVtdDv:o:c:s:i:a:p:m:", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("This is ringleader-%s\n", PACKAGE_VERSION);
            return 0;
        case 't':
            test_conf = 1;
            break;
        case 'd':
            daemon = 1;
            break;
        case 'D':
            stats_describe(stdout);
            return 0;
        case 'v':
            if (parse_int(optarg, 0, 11, &level) < 0) {
                fprintf(stderr, "ringleader: option -v requires a number from 0 to 11\n");
                return 1;
            }
            opt.verbosity = (int)level;
            break;
        case 'o':
            logfile = optarg;
            opt.log_file = optarg;
            break;
        case 'c':
            opt.conf_path = optarg;
            break;
        case 's':
            if (parse_int(optarg, 1, 65535, &v) < 0) {
                fprintf(stderr, "ringleader: option -s requires a port from 1 to 65535\n");
                return 1;
            }
            opt.stats_port = (int)v;
            break;
        case 'i':
            if (parse_int(optarg, 1, 86400000, &v) < 0) {
                fprintf(stderr, "ringleader: option -i requires a positive interval in msec\n");
                return 1;
            }
            opt.stats_interval_ms = (int)v;
            break;
        case 'a':
            opt.stats_addr = optarg;
            break;
        case 'p':
            pidfile = optarg;
            break;
        case 'm':
            if (parse_int(optarg, 512, 64 << 20, &v) < 0) {
                fprintf(stderr, "ringleader: option -m requires a size from 512 to 67108864\n");
                return 1;
            }
            opt.buf_size = (size_t)v;
            break;
        case 'W':
            if (parse_int(optarg, 1, 1024, &v) < 0) {
                fprintf(stderr, "ringleader: option --workers requires a number from 1 to 1024\n");
                return 1;
            }
            opt.workers = (uint32_t)v;
            break;
        case 'U':
            opt.upgrade_socket = optarg;
            break;
        case 'F':
            opt.upgrade_from = optarg;
            break;
        case 'u':
            upgrade = optarg;
            break;
        default:
            usage(stderr);
            return 1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ringleader: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 1;
    }

    if (upgrade != NULL) {
        /* Nothing of this process's own: the running one starts the successor, so that
         * under systemd it is in the service's group (docs/upgrade.md). */
        char line[600];
        int rc = upgrade_request(upgrade, RL_UPGRADE_WAIT_MS, line, sizeof(line));
        fprintf(rc == 0 ? stdout : stderr, "ringleader: upgrade: %s\n", line);
        return rc == 0 ? 0 : 1;
    }
    opt.argv = argv;

    {
        /* Checked here first, for -t and before a start (-d detaches only after it): a bad
         * file is reported on the terminal with every error it has, one per line, and the
         * exit status says so. proxy_run reads it again for itself. */
        struct conf *conf = NULL;
        char err[8192];
        /* The TLS files are read too (tls_conf_check): what a start or a reload would refuse. */
        /* And rejoin_log: a file that is not a journal is refused, not overwritten. */
        if (conf_load(opt.conf_path, &conf, err, sizeof(err)) < 0 ||
            tls_conf_check(conf, err, sizeof(err)) < 0 ||
            (conf->global.rejoin_log != NULL &&
             rejoin_journal_check(conf->global.rejoin_log, err, sizeof(err)) < 0)) {
            conf_free(conf);
            fprintf(stderr, "ringleader: configuration file '%s' is invalid:\n", opt.conf_path);
            for (char *line = strtok(err, "\n"); line != NULL; line = strtok(NULL, "\n"))
                fprintf(stderr, "  %s\n", line);
            return 1;
        }
        if (test_conf)
            conf_lint(conf, print_warning, NULL);
        conf_free(conf);
        if (test_conf) {
            printf("ringleader: configuration file '%s' syntax is ok\n", opt.conf_path);
            return 0;
        }
    }

    if (log_init((int)level, logfile) < 0) {
        fprintf(stderr, "ringleader: cannot open log file '%s': %s\n", logfile, strerror(errno));
        return 1;
    }
    char err[512];
    if (daemon && daemon_detach(err, sizeof(err)) < 0) {
        fprintf(stderr, "ringleader: %s\n", err);
        return 1;
    }
    struct pidfile pf = { 0 };
    /* A successor replaces the running process's pid file once it serves (upgrade.c). */
    if (opt.upgrade_from != NULL) {
        opt.pid_path = pidfile;
        opt.pidfile = &pf;
    } else if (pidfile != NULL && pidfile_create(&pf, pidfile, err, sizeof(err)) < 0) {
        fprintf(stderr, "ringleader: %s\n", err);
        log_error("%s", err);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    int status = proxy_run(&opt);
    pidfile_remove(&pf);
    return status;
}

"""test_signals.py: the signals a twemproxy operator sends (TTIN, TTOU, USR1, USR2, HUP) change what they should and never stop or kill the proxy."""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (NAMES, Memcached, Proxy, Runner, check, eq,  # noqa: E402
                     free_port, read_stats, server_lines)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_signals", per_test_timeout=30, total_timeout=120)

LINE_WAIT = 5.0   # seconds for a log line to appear


class Env(harness.Env):
    def __init__(self):
        self.mc = [Memcached.start() for _ in range(2)]
        self.backends = self.mc
        # A second pool of 20 servers nothing listens on (no preconnect: nothing fails):
        # the state dump must stay one screen.
        wide = ["127.0.0.1:%d:1 w%02d" % (free_port(), i) for i in range(20)]
        self.proxy = Proxy({
            "cache": {"hash": "fnv1a_64", "distribution": "ketama", "auto_eject_hosts": False,
                      "servers": server_lines(self.mc, NAMES[:2])},
            "wide": {"hash": "fnv1a_64", "distribution": "ketama", "servers": wide},
        })
        self.pid = self.proxy.proc.pid
        self.log = self.proxy.log_file

    def text(self, path=None):
        try:
            with open(path or self.log, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def wait_line(self, needle, count=1, path=None, timeout=LINE_WAIT):
        """Wait until needle occurs at least count times in the log; return the text."""
        timeout = patience(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            t = self.text(path)
            if t.count(needle) >= count:
                return t
            time.sleep(0.02)
        raise AssertionError("log %s: %d x %r not seen within %.0fs; tail:\n%s" % (
            path or self.log, count, needle, timeout, "\n".join(self.text(path).splitlines()[-15:])))

    def signal(self, signum, then_line, count=None):
        """Send one signal and wait for the line it logs (signals of one kind sent back to
        back may be merged by the kernel, so each waits for its own effect)."""
        n = self.text().count(then_line) + 1 if count is None else count
        os.kill(self.pid, signum)
        return self.wait_line(then_line, n)

    def state(self):
        """The process state letter from /proc (R, S, T stopped, Z, ...)."""
        with open("/proc/%d/stat" % self.pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    def serving(self):
        with self.proxy.client("cache", timeout=3) as c:
            eq(c.mc(b"version")[:8], b"VERSION ", "the proxy answers")



@R.test(ringleader=True)
def ttin_raises_the_level_and_info_lines_appear(env):
    env.signal(signal.SIGTTIN, "SIGTTIN: log level up to 6 (info)")
    check(env.state() in "RS", "running after SIGTTIN, state %s" % env.state())
    env.serving()
    # A reload's last line is at info level: written now, not at the default level 5.
    env.signal(signal.SIGHUP, "reload: every worker runs the new configuration")


@R.test(ringleader=True)
def ttou_lowers_the_level_and_info_lines_stop(env):
    env.signal(signal.SIGTTOU, "SIGTTOU: log level down to 5 (notice)")
    infos = env.text().count("every worker runs the new configuration")
    env.signal(signal.SIGHUP, "new configuration published")
    time.sleep(0.5)   # the info line would follow the publish line within milliseconds
    eq(env.text().count("every worker runs the new configuration"), infos,
       "info lines after SIGTTOU back to notice")
    check(env.state() in "RS", "running after SIGTTOU, state %s" % env.state())


@R.test(ringleader=True)
def the_level_stops_at_0_and_11(env):
    for level in range(4, -1, -1):
        env.signal(signal.SIGTTOU, "log level down to %d " % level)
    env.signal(signal.SIGTTOU, "log level down to 0 (emerg)")     # clamped, still logged
    env.serving()
    for level in range(1, 12):
        env.signal(signal.SIGTTIN, "log level up to %d " % level)
    env.signal(signal.SIGTTIN, "log level up to 11 (pverb)")
    for level in range(10, 4, -1):
        env.signal(signal.SIGTTOU, "log level down to %d " % level)
    check(env.state() in "RS", "state %s" % env.state())


@R.test(ringleader=True)
def usr1_reopens_the_log_after_logrotate_moved_it(env):
    rotated = env.log + ".1"
    os.rename(env.log, rotated)
    env.serving()
    os.kill(env.pid, signal.SIGUSR1)
    env.wait_line("SIGUSR1: log file reopened", path=env.log)
    check("SIGUSR1" not in env.text(rotated), "the reopen line went to the new file only")
    # Later lines go to the new file too, from every thread.
    env.signal(signal.SIGHUP, "new configuration published", count=1)
    check(env.state() in "RS", "running after SIGUSR1, state %s" % env.state())


@R.test(ringleader=True)
def usr2_logs_one_screen_of_state(env):
    stats = read_stats(env.proxy.stats_port)
    text = env.signal(signal.SIGUSR2, "state: pool 'wide'")
    dump = [ln.split("state: ", 1)[1] for ln in text.splitlines() if "signals.c" in ln and "state: " in ln]
    dump = dump[-(1 + 2 + 2 + 8 + 1):]          # the last dump: header, cache + 2, wide + 8 + 1
    check(dump[0].startswith("ringleader "), "header line %r" % dump[0])
    check("pid %d" % env.pid in dump[0], "pid in %r" % dump[0])
    cache = next(ln for ln in dump if ln.startswith("pool 'cache'"))
    for want in ("epoch %d" % stats["cache"]["epoch"], stats["cache"]["ring_checksum"],
                 "2 servers (2 up, 0 down)"):
        check(want in cache, "%r in %r" % (want, cache))
    for name in NAMES[:2]:
        check(any(ln.strip().startswith(name + " ") and " up " in ln for ln in dump),
              "server %s listed as up" % name)
    wide = [ln for ln in dump[dump.index(next(ln for ln in dump if ln.startswith("pool 'wide'"))):]]
    eq(len(wide), 1 + 8 + 1, "the 20-server pool: its line, 8 servers, one summary")
    check(wide[-1].strip().startswith("... 12 more servers"), "summary line %r" % wide[-1])
    check(env.state() in "RS", "running after SIGUSR2, state %s" % env.state())


@R.test(ringleader=True)
def term_after_all_of_them_exits_0_and_removes_the_pid_file(env):
    pidfile = env.log[:-len(".out")] + ".pid"
    eq(open(pidfile).read().strip(), str(env.pid), "the pid file names the proxy")
    eq(env.proxy.stop(), 0, "exit status after SIGTERM")
    check(not os.path.exists(pidfile), "pid file removed at exit")


R.main(Env)

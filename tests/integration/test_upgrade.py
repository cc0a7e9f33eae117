"""test_upgrade.py: --upgrade-from takes the running process's listeners over its upgrade socket: 20 upgrades in a row under pipelining memcached and Redis clients and a stream of new connections refuse nothing and lose nothing (every connection closed between replies), a successor that cannot start (a bad or missing file, a port taken) leaves the old one serving, a changed file keeps, closes and opens what it should, --upgrade has the old process start its successor, systemd hears MAINPID= then READY=1; nutcracker's kill + restart under the same load, side by side."""

import collections
import os
import random
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (NAMES, Memcached, Proc, Proxy, Redis, Runner, check, eq,  # noqa: E402
                     http, mc_values_len, read_stats, resp_encode, resp_parse, server_lines,
                     tmpdir)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_upgrade", per_test_timeout=120, total_timeout=300)

UPGRADES = 20
DEPTH = 8          # requests a pipelining client keeps in flight
DRAIN_MS = 5000    # drain_timeout: a bound, never reached by these clients


# ------------------------------------------------------------------ the load

class Conn:
    """One client connection and the replies it reads, told apart by how it ends: at a
    reply boundary (the proxy's orderly close) or not (a reset, a cut reply)."""

    def __init__(self, addr, tally):
        self.tally = tally
        self.buf = bytearray()
        self.sock = None
        try:
            self.sock = socket.create_connection(addr, timeout=patience(10))
        except ConnectionRefusedError:
            tally.add("refused")
            raise
        except OSError:
            tally.add("connect_failed")
            raise
        tally.add("connects")

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send(self, data):
        self.sock.sendall(data)

    def reply(self, parse):
        """The next reply (parse(buf) -> (value, length) or None), or raise EOFError when
        the proxy closed before it (nothing of it read), ConnectionError otherwise."""
        while True:
            r = parse(self.buf)
            if r is not None:
                del self.buf[:r[1]]
                return r[0]
            data = self.sock.recv(65536)
            if not data:
                if self.buf:
                    raise ConnectionError("closed inside a reply: %r" % bytes(self.buf[:80]))
                raise EOFError()
            self.buf += data


def mc_line(buf):
    i = buf.find(b"\r\n")
    return None if i < 0 else (bytes(buf[:i]), i + 2)


def mc_value(buf):
    n = mc_values_len(buf)
    if n is None:
        return None
    head = bytes(buf[:n])
    if head == b"END\r\n":
        return None, n
    return head.split(b"\r\n", 2)[1], n


def resp(buf):
    return resp_parse(buf, 0)


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = collections.Counter()
        self.problems = []

    def add(self, what, n=1):
        with self.lock:
            self.c[what] += n

    def problem(self, text, kind="broken"):
        """kind: "broken" (a connection reset, cut inside a reply, timed out) or "wrong"
        (a reply that is not the request's), counted apart and described (the first 10)."""
        with self.lock:
            self.c[kind] += 1
            if len(self.problems) < 10:
                self.problems.append(text)


class Load:
    """Two pipelining clients per protocol (memcached set/get pairs; Redis INCR of their
    own counter, whose every value must come once and in order, and SET/GET) and one
    client opening a connection per request, against mc_addr and rd_addr until stop().

    A connection the proxy closes at a reply boundary is the upgrade's orderly close:
    the client opens another and sends again what was not answered (nothing is lost:
    the proxy answers everything it read before it closes). Anything else is a failure
    (with the unanswered requests' count in failed_requests), after which a Redis client
    reads its counter again to go on."""

    def __init__(self, mc_addr, rd_addr):
        self.mc_addr, self.rd_addr = mc_addr, rd_addr
        self.tally = Tally()
        self.stopping = threading.Event()
        self.threads = []
        self.tag = "%d-%d" % (os.getpid(), random.randrange(1 << 30))

    def start(self):
        for i in range(2):
            self.threads.append(threading.Thread(target=self.guard, args=(self.mc_client, i)))
            self.threads.append(threading.Thread(target=self.guard, args=(self.rd_client, i)))
        self.threads.append(threading.Thread(target=self.guard, args=(self.connector, 0)))
        for t in self.threads:
            t.daemon = True
            t.start()
        return self

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(patience(30))
        check(not any(t.is_alive() for t in self.threads), "every load thread ended")
        return self.tally

    def guard(self, fn, i):
        try:
            fn(i)
        except Exception as e:        # a bug in the client itself must show
            self.tally.problem("%s %d: %r" % (fn.__name__, i, e))

    def connect(self, addr):
        """A connection, retried while refused (each refusal counted); None when stopping."""
        while not self.stopping.is_set():
            try:
                return Conn(addr, self.tally)
            except OSError:
                time.sleep(0.005)
        return None

    def pipeline(self, addr, make, counter=None):
        """Send batches of DEPTH requests (make() gives (bytes, parse, check) tuples) and
        read their replies; check(value) says whether a reply is right. Resend what an
        orderly close left unanswered."""
        conn, todo = None, []
        try:
            while not self.stopping.is_set():
                if conn is None:
                    conn = self.connect(addr)
                    if conn is None:
                        return
                if not todo:
                    todo = make()
                try:
                    conn.send(b"".join(r[0] for r in todo))
                    while todo:
                        value = conn.reply(todo[0][1])
                        req = todo.pop(0)
                        if req[2](value):
                            self.tally.add("answered")
                        else:
                            self.tally.problem("wrong reply %r to %r" % (value, req[0][:60]),
                                              "wrong")
                except EOFError:
                    self.tally.add("closed_between_replies")
                    conn.close()
                    conn = None
                except (OSError, ConnectionError) as e:
                    self.tally.problem("%s: %r with %d requests unanswered" % (
                        addr, e, len(todo)))
                    self.tally.add("failed_requests", len(todo))
                    conn.close()
                    conn, todo = None, []
                    if counter is not None:
                        counter["resync"] = True
        finally:
            if conn is not None:
                conn.close()

    def mc_client(self, i):
        seq = [0]

        def make():
            reqs = []
            for _ in range(DEPTH // 2):
                seq[0] += 1
                key = b"up:%s:mc%d:%d" % (self.tag.encode(), i, seq[0] % 50)
                val = b"v%d" % seq[0]
                reqs.append((b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val), mc_line,
                             lambda v: v == b"STORED"))
                reqs.append((b"get %s\r\n" % key, mc_value, lambda v, want=val: v == want))
            return reqs
        self.pipeline(self.mc_addr, make)

    def rd_client(self, i):
        key = "up:%s:rd%d" % (self.tag, i)
        state = {"next": 1, "resync": False}

        def counted(v):
            if v != state["next"]:
                return False
            state["next"] += 1
            return True

        def resynced(v):
            state["next"] = int(v or 0) + 1
            state["resync"] = False
            return True

        def make():
            reqs = []
            if state["resync"]:
                reqs.append((resp_encode("GET", key), resp, resynced))
            for k in range(DEPTH // 2):
                val = "w%d" % random.randrange(1 << 30)
                reqs.append((resp_encode("INCR", key), resp, counted))
                reqs.append((resp_encode("SET", key + ":%d" % k, val), resp,
                             lambda v: v == "OK"))
            return reqs
        self.pipeline(self.rd_addr, make, state)

    def connector(self, _i):
        """A new connection for every request, as short-lived clients do."""
        n = 0
        while not self.stopping.is_set():
            n += 1
            mc = n % 2 == 0
            conn = self.connect(self.mc_addr if mc else self.rd_addr)
            if conn is None:
                return
            try:
                conn.send(b"get up:none\r\n" if mc else resp_encode("PING"))
                v = conn.reply(mc_value if mc else resp)
                if (v is None) if mc else (v == "PONG"):
                    self.tally.add("answered")
                    self.tally.add("short_lived")
                else:
                    self.tally.problem("wrong reply %r on a new connection" % (v,), "wrong")
            except EOFError:
                self.tally.add("closed_between_replies")
            except (OSError, ConnectionError) as e:
                self.tally.problem("new connection: %r" % (e,))
                self.tally.add("failed_requests")
            finally:
                conn.close()
            time.sleep(0.002)


# ------------------------------------------------------------------ the environment

class Env(harness.Env):
    LOG_LINES = 40

    def __init__(self):
        self.need_own_proxy("starts, upgrades and kills its own proxies",
                            "--upgrade-from is ringleader's")
        self.backends = [Memcached.start() for _ in range(2)] + [Redis.start() for _ in range(2)]
        self.mc, self.rd = self.backends[:2], self.backends[2:]
        self.sock = os.path.join(tmpdir(), "upgrade.sock")
        self.generations = []         # every ringleader process started, oldest first
        self.figures = {}
        self.spawned = []             # pids of successors a ringleader started (--upgrade)
        self.proxy = Proxy(self.pools(), workers=2, admin=True,
                           glob={"drain_timeout": DRAIN_MS},
                           args=["--upgrade-socket", self.sock])
        self.pid_path = self.proxy.proc.argv[self.proxy.proc.argv.index("-p") + 1]
        self.proxy.proc.out = self.proxy.log_file
        self.generations.append(self.proxy.proc)
        self.current = self.proxy.proc

    def pools(self):
        return {
            "mc": {"hash": "fnv1a_64", "distribution": "ketama", "timeout": 10000,
                   "auto_eject_hosts": False, "servers": server_lines(self.mc, NAMES[:2])},
            "rd": {"hash": "fnv1a_64", "distribution": "ketama", "timeout": 10000,
                   "redis": True, "auto_eject_hosts": False,
                   "servers": server_lines(self.rd, NAMES[:2])},
        }

    def addr(self, pool):
        return self.proxy.addr(pool)

    def successor(self, conf=None, workers=None):
        """Start `ringleader --upgrade-from` with the running one's options (another log
        file; conf: another configuration file; workers: another count). The Proc."""
        argv = list(self.proxy.proc.argv)
        n = len(self.generations)
        argv[argv.index("-o") + 1] = os.path.join(tmpdir(), "upgrade-%d.out" % n)
        if conf is not None:
            argv[argv.index("-c") + 1] = conf
        if workers is not None:
            argv[argv.index("--workers") + 1] = str(workers)
        p = Proc("ringleader-up%d" % n, argv + ["--upgrade-from", self.sock])
        p.out = argv[argv.index("-o") + 1]
        return p

    def upgrade(self, want, workers=None, conf=None):
        """One upgrade (conf: another file): the successor serves with upgrades == want,
        the previous process exits 0 and the pid file names the successor."""
        old = self.current
        new = self.successor(workers=workers, conf=conf)
        self.generations.append(new)
        deadline = time.monotonic() + patience(20)
        seen = None
        while time.monotonic() < deadline:
            check(new.alive(), "upgrade %d: the successor runs (exit %s):\n%s" % (
                want, new.popen.poll(), text(new.out)[-2000:]))
            try:
                seen = read_stats(self.proxy.stats_port)["upgrades"]
            except (OSError, ValueError, KeyError):
                seen = None
            if seen == want and not old.alive():
                break
            time.sleep(0.02)
        eq(seen, want, "upgrades in the stats after upgrade %d" % want)
        eq(old.popen.wait(patience(DRAIN_MS / 1000 + 10)), 0, "the previous process's exit")
        eq(read_file(self.pid_path).strip(), str(new.pid), "the pid file names the successor")
        self.current = new
        return new

    def diagnostics(self):
        tails = []
        for p in self.generations[-2:]:
            tails.append("--- %s log tail:\n%s" % (p.name, "\n".join(
                text(getattr(p, "out", self.proxy.log_file)).splitlines()[-20:])))
        return "\n".join(tails)

    def close(self):
        for p in self.generations:
            p.stop()
        for pid in self.spawned:         # started by a ringleader: not our children
            try:
                os.kill(pid, 15)
                if not gone(pid, 10):
                    os.kill(pid, 9)
            except ProcessLookupError:
                pass
        for b in self.backends:
            b.stop()


def text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def read_file(path):
    with open(path) as f:
        return f.read()


def wait_line(path, needle, timeout=10):
    deadline = time.monotonic() + patience(timeout)
    while needle not in text(path):
        check(time.monotonic() < deadline, "%r not in %s:\n%s" % (
            needle, path, text(path)[-800:]))
        time.sleep(0.02)


def serving(env, rd=True):
    """A memcached and a Redis request through the proxy, answered."""
    with env.proxy.client("mc", timeout=patience(5)) as c:
        eq(c.mc(b"version")[:8], b"VERSION ", "memcached pool answers")
    if rd:
        with env.proxy.client("rd", timeout=patience(5)) as c:
            eq(c.rd("PING"), "PONG", "Redis pool answers")


def report(name, t):
    c = t.c
    print("  %-32s refused connects %4d, connections reset or cut %4d, failed or wrong "
          "requests %5d | answered %6d, closed between replies %4d, short-lived clients %5d" % (
              name, c["refused"] + c["connect_failed"], c["broken"],
              c["failed_requests"] + c["wrong"], c["answered"], c["closed_between_replies"],
              c["short_lived"]))
    sys.stdout.flush()


# ------------------------------------------------------------------ the tests

@R.test
def a_successor_that_cannot_start_leaves_the_old_serving(env):
    before = read_stats(env.proxy.stats_port)
    bad = os.path.join(tmpdir(), "broken.yml")
    with open(bad, "w") as f:
        f.write("mc:\n  listen: 127.0.0.1:1\n  servers: [oops\n")
    for conf, why in ((bad, "a broken file"), (os.path.join(tmpdir(), "missing.yml"),
                                                "a missing file")):
        p = env.successor(conf=conf)
        status = p.popen.wait(patience(20))
        p.stop()
        check(status != 0, "%s: the successor exits non-zero (%s)" % (why, status))
        check("invalid" in text(p.log_path) or "cannot" in text(p.log_path),
              "%s: the error is reported: %r" % (why, text(p.log_path)[-400:]))
        check(env.current.alive(), "%s: the running process lives" % why)
        serving(env)
        eq(read_file(env.pid_path).strip(), str(env.current.pid), "%s: the pid file" % why)
    # One that fails after it received the sockets: a new pool on a port a backend holds.
    busy = os.path.join(tmpdir(), "busy-port.yml")
    with open(busy, "w") as f:
        f.write(harness.yaml_dump(dict(env.proxy.pools, taken=dict(
            env.proxy.pools["mc"], listen="127.0.0.1:%d" % env.mc[0].port),
            ringleader=env.proxy.glob)))
    p = env.successor(conf=busy)
    status = p.popen.wait(patience(20))
    p.stop()
    check(status != 0, "a successor whose port is taken exits non-zero (%s)" % status)
    check("127.0.0.1:%d" % env.mc[0].port in text(p.log_path), "it says which port: %r" %
          text(p.log_path)[-400:])
    wait_line(env.current.out, "ended the handoff before serving")
    check(env.current.alive(), "the running process lives")
    serving(env)
    with harness.Raw(env.addr("mc"), patience(5)) as c:     # a connection accepted anew
        eq(c.mc(b"version")[:8], b"VERSION ", "the running process still accepts")
    eq(read_file(env.pid_path).strip(), str(env.current.pid), "the pid file")
    after = read_stats(env.proxy.stats_port)
    eq(after["upgrades"], before["upgrades"], "no upgrade counted")
    check(os.path.exists(env.sock), "the upgrade socket is still there")


@R.test(timeout=240)
def twenty_upgrades_under_load_refuse_and_lose_nothing(env):
    t0 = time.monotonic()
    load = Load(env.addr("mc"), env.addr("rd")).start()
    try:
        time.sleep(0.3)
        for i in range(1, UPGRADES + 1):
            if i == 10:
                # under load too: a successor on a broken file changes nothing
                bad = os.path.join(tmpdir(), "broken-under-load.yml")
                with open(bad, "w") as f:
                    f.write("mc: [\n")
                p = env.successor(conf=bad)
                check(p.popen.wait(patience(20)) != 0, "the broken successor exits non-zero")
                p.stop()
            # one upgrade with more workers, the next with fewer (kept: a restart shrinks)
            env.upgrade(i, workers=3 if i in (5, 6) else None)
            time.sleep(0.1)
        while time.monotonic() - t0 < 3:
            time.sleep(0.1)         # so the first process's uptime would differ from ours
    finally:
        tally = load.stop()
    print()
    report("ringleader, %d upgrades:" % UPGRADES, tally)
    env.figures["ringleader"] = tally
    eq(tally.problems, [], "failures seen by the clients")
    eq(tally.c["refused"] + tally.c["connect_failed"], 0, "refused connects")
    eq(tally.c["broken"], 0, "connections reset or cut inside a reply")
    eq(tally.c["failed_requests"] + tally.c["wrong"], 0, "failed or wrong requests")
    check(tally.c["closed_between_replies"] >= UPGRADES,
          "the pipelining clients were closed by the upgrades (%d)" %
          tally.c["closed_between_replies"])
    check(tally.c["answered"] > 1000 and tally.c["short_lived"] > 20,
          "load ran: %s" % dict(tally.c))

    # what the new process shows: its own start, the count of handoffs
    st = read_stats(env.proxy.stats_port)
    eq(st["upgrades"], UPGRADES, "stats upgrades")
    since_first = time.monotonic() - t0
    check(st["uptime"] + 2 <= since_first, "uptime %d is the last process's (%.1f s since "
          "the first upgrade)" % (st["uptime"], since_first))
    status, body = http(env.proxy.admin_port, "GET", "/stats")
    eq(status, 200, "admin /stats")
    check('"upgrades": %d' % UPGRADES in body, "admin /stats upgrades: %s" % body[:200])
    status, body = http(env.proxy.admin_port, "GET", "/metrics")
    check("ringleader_upgrades_total %d" % UPGRADES in body, "/metrics upgrades")
    # every earlier process said what it drained, and went
    for p in env.generations[:-1]:
        log = text(getattr(p, "out", env.proxy.log_file))
        check(p.popen.poll() == 0, "%s exited 0" % p.name)
        check("serves now" in log and "drained" in log and "drain_timeout" not in log,
              "%s logged its handoff and drain:\n%s" % (p.name, log[-1500:]))
    check("the running process listens with 3 sockets" in text(env.generations[7].out),
          "a successor with fewer workers kept the running count")


@R.test(timeout=240)
def nutcracker_kill_and_restart_under_the_same_load(env):
    if "ringleader" not in env.figures:
        raise harness.Skip("the ringleader figures come from the test before")
    try:
        subprocess.run(["nutcracker", "-V"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        raise harness.Skip("nutcracker is not installed")
    nc = Proxy(env.pools(), kind="nutcracker")
    procs = [nc.proc]
    try:
        load = Load(nc.addr("mc"), nc.addr("rd")).start()
        try:
            time.sleep(0.3)
            for _ in range(UPGRADES):
                nc.proc.stop()
                nc.proc = Proc("nutcracker", nc.proc.argv)
                procs.append(nc.proc)
                nc.proc.wait_listening(nc.addr("mc")[1])
                nc.proc.wait_listening(nc.addr("rd")[1])
                time.sleep(0.1)
        finally:
            tally = load.stop()
    finally:
        for p in procs:
            p.stop()
    print()
    print("  side by side, under the same clients:")
    report("ringleader, %d upgrades:" % UPGRADES, env.figures["ringleader"])
    report("nutcracker, %d kill + restart:" % UPGRADES, tally)
    # nutcracker's figures are printed, not asserted: what a restart costs depends on timing
    check(tally.c["answered"] > 0, "the load reached nutcracker")


@R.test
def a_successor_with_another_file_keeps_what_stays_and_opens_what_is_new(env):
    # mc stays (its sockets are taken), rd goes (closed once the successor serves), mc2
    # is new (a new port), mcu is new and a unix socket; then back to the first file, the
    # unix socket's listener handed over too (its file stays: the successor's).
    mc2_port = harness.free_port()
    unix = os.path.join(tmpdir(), "mcu.sock")
    pools = {"mc": dict(env.proxy.pools["mc"]),
             "mc2": dict(env.proxy.pools["mc"], listen="127.0.0.1:%d" % mc2_port),
             "mcu": dict(env.proxy.pools["mc"], listen=unix)}
    changed = os.path.join(tmpdir(), "changed.yml")
    with open(changed, "w") as f:
        f.write(harness.yaml_dump(dict(pools, ringleader=env.proxy.glob)))
    before = read_stats(env.proxy.stats_port)["upgrades"]
    new = env.upgrade(before + 1, conf=changed)
    serving(env, rd=False)
    with harness.Raw(("127.0.0.1", mc2_port), patience(5)) as c:
        eq(c.mc(b"version")[:8], b"VERSION ", "the new pool's port answers")
    eq(unix_version(unix)[:8], b"VERSION ", "the new unix socket answers")
    try:
        socket.create_connection(env.addr("rd"), timeout=patience(5)).close()
        check(False, "the removed pool's port still accepts")
    except ConnectionRefusedError:
        pass
    check("pool %s:%d of the previous process is not in this configuration: closed" %
          env.addr("rd") in text(new.out), "the successor says what it closed")
    # a successor that fails once it holds the sockets (its admin port is a backend's)
    # leaves the unix socket's file, and the upgrade socket's, to the running process
    failing = os.path.join(tmpdir(), "changed-admin-taken.yml")
    with open(failing, "w") as f:
        f.write(harness.yaml_dump(dict(pools, ringleader=dict(
            env.proxy.glob, admin="127.0.0.1:%d" % env.mc[1].port))))
    p = env.successor(conf=failing)
    check(p.popen.wait(patience(20)) != 0, "the successor whose admin port is taken fails")
    p.stop()
    wait_line(new.out, "ended the handoff before serving")
    check(os.path.exists(unix) and os.path.exists(env.sock), "the socket files stay")
    eq(unix_version(unix)[:8], b"VERSION ", "the unix socket answers")
    # a second upgrade on the same file: the unix socket is handed over, its file kept
    env.upgrade(before + 2, conf=changed)
    check(os.path.exists(unix), "the unix socket's file is still there")
    eq(unix_version(unix)[:8], b"VERSION ", "the unix socket answers after the handoff")
    # and back: rd opens again on its port, mcu's file is the last one's to remove
    env.upgrade(before + 3)
    serving(env)
    check(not os.path.exists(unix), "the unix socket no pool listens on is removed")
    eq(read_stats(env.proxy.stats_port)["upgrades"], before + 3, "upgrades")


def unix_version(path):
    """memcached `version` through a unix socket listener: the reply line."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(patience(5))
    try:
        s.connect(path)
        s.sendall(b"version\r\n")
        buf = b""
        while not buf.endswith(b"\r\n"):
            data = s.recv(4096)
            if not data:
                break
            buf += data
        return buf
    finally:
        s.close()


def gone(pid, timeout):
    """Wait until pid (not our child) has exited; whether it has. A zombie has: its
    parent exited and whoever adopted it reaps in its own time."""
    deadline = time.monotonic() + patience(timeout)
    while True:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def ask_upgrade(env):
    """`ringleader --upgrade SOCK`, as the unit's upgrade command runs it."""
    return subprocess.run([harness.binary("ringleader"), "--upgrade", env.sock],
                          capture_output=True, timeout=patience(60))


@R.test
def upgrade_asks_the_running_process_to_start_its_successor(env):
    # What the systemd unit's command does: the running process starts the binary at its
    # own path with its own options as its child (in the service's control group).
    before = read_stats(env.proxy.stats_port)["upgrades"]
    old = env.current
    r = ask_upgrade(env)
    eq(r.returncode, 0, "--upgrade exit (%r %r)" % (r.stdout, r.stderr))
    check(b"ok: process " in r.stdout, "--upgrade says how it went: %r" % r.stdout)
    new = int(read_file(env.pid_path))
    check(new != old.pid and str(new).encode() in r.stdout, "the pid file names the successor")
    env.spawned.append(new)
    eq(old.popen.wait(patience(DRAIN_MS / 1000 + 10)), 0, "the previous process's exit")
    check("asked by process" in text(old.out) and "as process %d" % new in text(old.out),
          "the previous process started it: %s" % text(old.out)[-600:])
    eq(read_stats(env.proxy.stats_port)["upgrades"], before + 1, "upgrades")
    serving(env)

    # A successor that cannot start (the file the running process reads is broken): the
    # asker hears it failed, the running process goes on.
    with open(env.proxy.conf_path) as f:
        good = f.read()
    try:
        with open(env.proxy.conf_path, "w") as f:
            f.write(good + "\nbroken: [\n")
        r = ask_upgrade(env)
    finally:
        with open(env.proxy.conf_path, "w") as f:
            f.write(good)
    eq(r.returncode, 1, "--upgrade exit when the successor fails (%r)" % r.stderr)
    check(b"failed: the new process" in r.stderr and b"still serves" in r.stderr,
          "--upgrade says it failed: %r" % r.stderr)
    check(not gone(new, 0.2), "the running process lives")
    eq(int(read_file(env.pid_path)), new, "the pid file")
    eq(read_stats(env.proxy.stats_port)["upgrades"], before + 1, "no upgrade counted")
    serving(env)
    # and one that works again after it
    r = ask_upgrade(env)
    eq(r.returncode, 0, "--upgrade after a failed one (%r)" % r.stderr)
    newer = int(read_file(env.pid_path))
    env.spawned.append(newer)
    check(gone(new, DRAIN_MS / 1000 + 10), "the previous process exited")
    eq(read_stats(env.proxy.stats_port)["upgrades"], before + 2, "upgrades")
    env.current = None


@R.test
def systemd_hears_the_new_main_pid_from_the_old_then_ready_from_the_new(env):
    # A fake service manager: the notify socket, each datagram with its sender's pid
    # (SO_PASSCRED). The old (main) process says MAINPID=<successor>, which NotifyAccess=
    # main accepts from it; then the successor, main from then on, says READY=1; the old
    # one never says STOPPING=1 (the service does not stop).
    with open(os.path.join(harness.TOP_BUILDDIR, "config.h")) as f:
        if "#define HAVE_LIBSYSTEMD 1" not in f.read():
            raise harness.Skip("built without libsystemd: no sd_notify")
    path = os.path.join(tmpdir(), "notify.sock")
    usock = os.path.join(tmpdir(), "upgrade-notify.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    s.settimeout(patience(10))
    pids = []

    def message():
        data, anc, _flags, _addr = s.recvmsg(4096, socket.CMSG_SPACE(12))
        sender = None
        for level, kind, cdata in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                sender = int.from_bytes(cdata[:4], sys.byteorder)
        return sender, data.decode()

    p = Proxy({"mc": env.pools()["mc"]}, workers=1, env=dict(os.environ, NOTIFY_SOCKET=path),
              args=["--upgrade-socket", usock])
    try:
        eq(message(), (p.proc.pid, "READY=1"), "the first process's READY=1")
        r = subprocess.run([harness.binary("ringleader"), "--upgrade", usock],
                           capture_output=True, timeout=patience(60))
        eq(r.returncode, 0, "--upgrade (%r)" % r.stderr)
        new = int(r.stdout.split(b"process ")[1].split()[0])
        pids.append(new)
        eq(message(), (p.proc.pid, "MAINPID=%d" % new), "the old process names the new main")
        eq(message(), (new, "READY=1"), "then the new one is ready")
        eq(p.proc.popen.wait(patience(DRAIN_MS / 1000 + 10)), 0, "the old process's exit")
        os.kill(new, 15)
        eq(message(), (new, "STOPPING=1"), "the next message: the new one stopping")
        check(gone(new, DRAIN_MS / 1000 + 10), "the new process exited")
    finally:
        p.stop()
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        s.close()


@R.test
def the_last_process_stops_and_removes_its_files(env):
    serving(env)
    pid = int(read_file(env.pid_path))
    if env.current is not None:
        eq(env.current.stop(), 0, "exit status on SIGTERM")
    else:
        os.kill(pid, 15)
        check(gone(pid, DRAIN_MS / 1000 + 10), "process %d exited on SIGTERM" % pid)
    check(not os.path.exists(env.pid_path), "the pid file is removed")
    check(not os.path.exists(env.sock), "the upgrade socket is removed")


if __name__ == "__main__":
    sys.exit(R.run(Env))

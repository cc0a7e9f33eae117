"""test_faults.py: the proxy against misbehaving backends (mock_backend.py) beside real ones, client garbage, backpressure, limits and shutdown."""

import os
import random
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (NAMES, Memcached, Proxy, Redis, RespError, Runner, Skip,  # noqa: E402
                     binary, check, eq, free_port, mc_values_len, owners, resp_encode,
                     server_lines, unique)
from mock_backend import (MockBackend, close, delay, garbage, half_close,  # noqa: E402
                          half_stall, silent)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_faults", per_test_timeout=40, total_timeout=180)

TIMEOUT_MS = 300          # `timeout:` of the fault pools
SLACK = 5.0               # an error reply due at the timeout may take this many timeouts (sanitizer builds are slow)
SANITIZER_MARKS = (b"AddressSanitizer", b"LeakSanitizer", b"runtime error:",
                   b"UndefinedBehaviorSanitizer")
KNOWN_BUGS = bool(os.environ.get("RL_KNOWN_BUGS"))   # 1: run the tests of known bugs too

# Proxy bugs these tests found, fixed since; a test that meets one again fails with its
# name, so a regression says what it is.
BUG_SERVER_UAF = ("BUG(server-free-uaf): server_free_if_idle() frees a struct server once "
                  "its conns[] slots are NULL, but a closing sconn still points to it and "
                  "its close callback (sconn_unref -> server_free_if_idle) reads it again: "
                  "heap-use-after-free at every shutdown, SIGSEGV at exit in the release build")
BUG_BACKPRESSURE = ("BUG(backpressure-inflight): client_output_limit counts only reply "
                    "bytes already received, so a client that pipelines 20,000 GETs has them "
                    "all forwarded at once (client_paused stays 0) and the proxy buffers "
                    "every reply: RSS > 900 MB after 5 s, another client's GET waits > 10 s")


def known_bug(name):
    if not KNOWN_BUGS:
        raise Skip(name + " (RL_KNOWN_BUGS=1 runs this test)")


def proxy_output(p):
    """Everything the proxy wrote: its stderr/stdout (sanitizers) and its -o log."""
    out = b""
    for path in (p.proc.log_path, getattr(p, "log_file", None)):
        try:
            with open(path, "rb") as fh:
                out += fh.read()
        except (OSError, TypeError):
            pass
    return out


def uaf_signature(out, rc):
    """True when a proxy's output and exit status show BUG_SERVER_UAF and nothing else."""
    if b"heap-use-after-free" in out:
        return out.count(b"ERROR: AddressSanitizer") == 1 and b"runtime error:" not in out \
            and b"in server_free_if_idle" in out[out.find(b"heap-use-after-free"):][:400]
    return rc == -signal.SIGSEGV and not any(m in out for m in SANITIZER_MARKS)


class GProxy(Proxy):
    """harness.Proxy with one worker by default, and a top-level `ringleader:` block."""

    def __init__(self, pools, glob=None, workers=1, **kw):
        super().__init__(pools, workers=workers, glob=glob, **kw)


def value_of(k):
    return b"val:" + k


def mc_one(c, timeout=None):
    """One complete memcached reply (a VALUE...END block or one line)."""
    return c.read_until(mc_values_len, timeout)


def mc_value_reply(k, v, flags=0):
    return b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (k, flags, len(v), v)


def quiet(c, wait=0.3):
    """Nothing more arrives on c within wait seconds (and nothing is buffered)."""
    if c.buf:
        return False
    c.sock.settimeout(wait)
    try:
        data = c.sock.recv(65536)
    except socket.timeout:
        return True
    finally:
        c.sock.settimeout(c.timeout)
    c.buf += data
    return False


def is_err(r, prefix="ERR"):
    return isinstance(r, RespError) and str(r).startswith(prefix)


class Traffic:
    """A second client doing exact round trips to healthy keys in a thread, so a test
    can show that a fault on one server does not touch other clients' requests."""

    def __init__(self, proxy, keys, redis=False):
        self.proxy = proxy
        self.keys = keys
        self.redis = redis
        self.done = []            # completion times of good round trips
        self.errors = []
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        self.t.join(5)

    def run(self):
        try:
            with self.proxy.client(timeout=5) as c:
                i = 0
                while not self.stop_ev.is_set() and i < 100000:
                    k = self.keys[i % len(self.keys)]
                    i += 1
                    if self.redis:
                        got = c.rd("GET", k)
                        want = value_of(k)
                    else:
                        c.send(b"get " + k + b"\r\n")
                        got = mc_one(c)
                        want = mc_value_reply(k, value_of(k))
                    if got != want:
                        self.errors.append((k, got))
                        return
                    self.done.append(time.monotonic())
                    time.sleep(0.002)
        except Exception as e:   # reported by check()
            self.errors.append(("exception", repr(e)))

    def check(self, t0, t1):
        check(not self.errors, "healthy traffic saw wrong replies: %r", self.errors[:3])
        n = sum(1 for t in self.done if t0 <= t <= t1)
        check(n > 0, "no healthy round trip completed during the fault (%d in all)",
              len(self.done))
        return n


class Fleet:
    """One pool: a mock backend beside real ones, its proxy, and which keys land where."""

    def __init__(self, redis, nreal=2, timeout=TIMEOUT_MS, workers=1, glob=None, **extra):
        self.redis = redis
        self.mock = MockBackend.start(protocol="redis" if redis else "memcache")
        self.reals = [Redis.start() if redis else Memcached.start() for _ in range(nreal)]
        backends = [self.mock] + self.reals
        pool = {"hash": "fnv1a_64", "distribution": "ketama", "timeout": timeout,
                "auto_eject_hosts": False,
                "servers": server_lines(backends, NAMES)}
        if redis:
            pool["redis"] = True
        pool.update(extra)
        self.proxy = GProxy({"p": pool}, glob=glob, workers=workers)
        self.on_mock, self.on_real = self.place(120)

    def client(self, timeout=5):
        return self.proxy.client(timeout=timeout)

    def place(self, n):
        """Store n keys through the proxy; ([keys on the mock], [[keys on real i]])."""
        keys = [unique(b"f") + b"-%d" % i for i in range(n)]
        before = len(self.mock.requests())
        with self.client() as c:
            for k in keys:
                if self.redis:
                    eq(c.rd("SET", k, value_of(k)), "OK", "SET " + k.decode())
                else:
                    eq(c.mc_store(b"set", k, value_of(k)), b"STORED\r\n", "set " + k.decode())
        mocked = {k for r in self.mock.requests()[before:] for k in r.keys}
        rest = [k for k in keys if k not in mocked]
        own = owners(self.reals, rest)
        on_real = [[k for k in rest if own[k] == [i]] for i in range(len(self.reals))]
        check(len(mocked) >= 5 and all(len(x) >= 5 for x in on_real),
              "unbalanced placement: %d on the mock, %r on the real ones",
              len(mocked), [len(x) for x in on_real])
        check(sum(len(x) for x in on_real) == len(rest), "a key on no backend or on two")
        return [k for k in keys if k in mocked], on_real

    def healthy(self):
        return [self.on_real[0][0], self.on_real[1][0], self.on_real[0][1], self.on_real[1][1]]

    def get(self, c, k, timeout=None):
        """Ask for one key; the raw reply (memcached) or the parsed one (Redis)."""
        if self.redis:
            return c.rd("GET", k, timeout=timeout)
        c.send(b"get " + k + b"\r\n")
        return mc_one(c, timeout)

    def want(self, k):
        return value_of(k) if self.redis else mc_value_reply(k, value_of(k))

    def is_error(self, r, what=None):
        if self.redis:
            return is_err(r, "ERR" + (" " + what if what else ""))
        return r.startswith(b"SERVER_ERROR" + (b" " + what.encode() if what else b"")) and \
            r.endswith(b"\r\n") and r.count(b"\r\n") == 1

    def mock_conn_of_last(self, k):
        reqs = [r for r in self.mock.requests() if k in r.keys]
        check(reqs, "the mock never saw %r", k)
        return reqs[-1].conn


class Env(harness.Env):
    """A memcache and a Redis Fleet. Every proxy a test starts joins self.proxies, for the
    sanitizer check at the end (and close(), which stops each by its PID, then every
    fleet's backends)."""

    def __init__(self):
        self.need_own_proxy("fault tests need their own mock backends, not a running proxy",
                            "fault tests assert ringleader's error replies")
        binary("ringleader")
        self.fleets = []
        self.proxies = []
        self.backends = []
        self.mc = self.fleet(redis=False)
        self.rd = self.fleet(redis=True)

    def fleet(self, **kw):
        f = Fleet(**kw)
        self.fleets.append(f)
        self.proxies.append(f.proxy)
        self.backends += [f.mock] + f.reals
        return f

    def both(self):
        return (self.mc, self.rd)

    def diagnostics(self):
        out = []
        for f in self.fleets:
            out.append("--- %s proxy log tail:\n%s" % ("redis" if f.redis else "memcache",
                                                       f.proxy.log_tail(15)))
        return "\n".join(out)


def reset(f):
    f.mock.reset()
    # The previous test may have left the proxy's connection to the mock stalled:
    # make sure every mock key answers again before the next test starts.
    deadline = time.monotonic() + patience(3)
    with f.client() as c:
        while True:
            r = f.get(c, f.on_mock[0])
            if r == f.want(f.on_mock[0]):
                return
            check(time.monotonic() < deadline, "the mock's keys do not answer again: %r", r)
            time.sleep(0.1)


def get_settled(f, c, k, what, timeout=3):
    """f.get(c, k) until it is k's value, bounded: on a loaded machine the reconnect to
    the mock (Python threads) can take longer than the pool's 300 ms timeout, and a
    timeout error meanwhile is not the fault under test. Any other reply, or a timeout
    past the bound (a proxy that did not recover), fails."""
    deadline = time.monotonic() + patience(timeout)
    while True:
        r = f.get(c, k)
        if r == f.want(k) or not f.is_error(r, "timeout") or time.monotonic() >= deadline:
            eq(r, f.want(k), what)
            return
        time.sleep(0.05)


# ---------------------------------------------------------------- a broken reply

def fault_then_recover(f, action):
    """A client asks for a mock key whose reply is broken by action, between requests
    to healthy servers; other clients run meanwhile. Returns the error reply."""
    reset(f)
    k = f.on_mock[1]
    h = f.healthy()
    with f.client() as c, Traffic(f.proxy, h, f.redis) as tr:
        eq(f.get(c, k), f.want(k), "before the fault")
        conn = f.mock_conn_of_last(k)
        time.sleep(0.05)
        f.mock.on_key(k, action, times=1)
        t0 = time.monotonic()
        r = f.get(c, k, timeout=3)
        check(f.is_error(r), "a broken reply gives one error reply, got %r", r)
        if action.kind == "garbage":      # else the mock closed it itself
            check(f.mock.wait_for(lambda: f.mock.closed_by_peer(conn)),
                  "the proxy did not close its connection to the broken server")
        # The same client connection is still usable, for healthy and faulty server alike.
        for x in h[:2]:
            eq(f.get(c, x), f.want(x), "healthy key after the fault")
        get_settled(f, c, k, "the broken server's key after the fault")
        check(f.mock_conn_of_last(k) != conn, "the proxy did not reconnect")
        check(quiet(c), "extra bytes after the replies: %r", bytes(c.buf))
        time.sleep(0.05)
        tr.check(t0, time.monotonic())
        # The same in a pipeline: the broken reply sits between two healthy ones.
        f.mock.on_key(k, action, times=1)
        if f.redis:
            c.send(resp_encode("GET", h[0]) + resp_encode("GET", k) + resp_encode("GET", h[1]))
            got = [c.read_resp(timeout=3) for _ in range(3)]
        else:
            c.send(b"get %s\r\nget %s\r\nget %s\r\n" % (h[0], k, h[1]))
            got = [mc_one(c, timeout=3) for _ in range(3)]
        eq(got[0], f.want(h[0]), "pipelined reply before the fault")
        check(f.is_error(got[1]), "pipelined faulty reply %r", got[1])
        eq(got[2], f.want(h[1]), "pipelined reply after the fault")
        get_settled(f, c, k, "recovered after the pipelined fault")
    return r


@R.test
def garbage_reply_memcache(env):
    fault_then_recover(env.mc, garbage(b"HELLO\r\n"))
    fault_then_recover(env.mc, garbage(b"VALUE x 0 notanumber\r\n"))


@R.test
def garbage_reply_redis(env):
    fault_then_recover(env.rd, garbage(b"?what\r\n"))      # no such RESP type byte
    fault_then_recover(env.rd, garbage(b"HELLO\r\n"))


@R.test
def half_reply_header_then_close(env):
    # The connection ends inside the reply's first line: nothing of it reached the client.
    fault_then_recover(env.mc, half_close(cut=9))           # "VALUE f.."
    fault_then_recover(env.rd, half_close(cut=2))           # "$1"


def half_body_then_close(f):
    """The connection ends inside a value whose header was already sent on. The brief
    asks for an error reply and a usable connection; ringleader streams a reply to the
    client as it arrives, so the header is gone and (src/proxy/server.c,
    msg_answer_error: "Half a reply already went out: the stream cannot be mended") it
    closes the client instead. What must hold either way: the client never sees bytes
    that were not part of the real reply followed by more replies (a corrupt stream)."""
    reset(f)
    k = f.on_mock[2]
    v = value_of(k)
    raw = (b"$%d\r\n%s\r\n" % (len(v), v)) if f.redis else mc_value_reply(k, v)
    cut = raw.index(v) + len(v) // 2          # inside the value
    f.mock.on_key(k, half_close(cut=cut), times=1)
    err = b"-ERR" if f.redis else b"SERVER_ERROR"
    with f.client() as c:
        c.send(resp_encode("GET", k) if f.redis else b"get " + k + b"\r\n")
        try:
            got = c.read_until(lambda b: len(b) if b.startswith(err) and b.endswith(b"\r\n")
                               else None, timeout=3)
        except EOFError:
            got = bytes(c.buf)
            check(raw.startswith(got), "a cut reply was mended with foreign bytes: %r", got)
            raise AssertionError("BUG(half-reply-streamed): a backend closing inside a value whose "
                       "header was already streamed closes the client (got %d of %d bytes, "
                       "then EOF) instead of an error reply on a usable connection"
                       % (len(got), len(raw)))
        check(got.count(b"\r\n") == 1, "one error line, got %r", got)
        eq(f.get(c, k), f.want(k), "the connection is usable after the error")


@R.test
def half_reply_value_then_close_memcache(env):
    half_body_then_close(env.mc)


@R.test
def half_reply_value_then_close_redis(env):
    half_body_then_close(env.rd)


# ---------------------------------------------------------------- slow and silent servers

@R.test
def joined_gets_with_a_broken_or_late_reply(env):
    """Single-key gets to one server in one write travel as one `get a b c` command
    (coalesce_gets). A reply to it that names a key nobody asked for reaches no client:
    the members before it read as misses, the one it lands on gets SERVER_ERROR and the
    connection is closed. An error line answers every member. A late reply goes to
    nobody. Requests to other servers in the same pipeline are untouched throughout."""
    f = env.mc
    reset(f)
    a, b, z = f.on_mock[2], f.on_mock[3], f.on_mock[4]
    h = f.healthy()[0]
    batch = b"get %s\r\nget %s\r\nget %s\r\nget %s\r\n" % (a, b, h, z)

    def send_batch(c, timeout=3):
        c.send(batch)
        got = [mc_one(c, timeout=timeout) for _ in range(4)]
        joined = [r for r in f.mock.requests() if a in r.keys]
        check(joined and joined[-1].keys == [a, b, z],
              "the mock's gets were not joined into one command: %r",
              joined[-1].keys if joined else None)
        return got

    with f.client() as c:
        eq(send_batch(c), [f.want(a), f.want(b), f.want(h), f.want(z)], "joined, healthy")
        conn = f.mock_conn_of_last(a)
        f.mock.on_key(a, garbage(b"VALUE not-asked 0 5\r\nstray\r\nEND\r\n"), times=1)
        got = send_batch(c)
        eq(got[:3], [b"END\r\n", b"END\r\n", f.want(h)], "before the stray item")
        check(f.is_error(got[3]), "the member the stray item lands on: %r", got[3])
        check(f.mock.wait_for(lambda: f.mock.closed_by_peer(conn)),
              "the proxy kept its connection to the server that sent a stray item")
        eq(send_batch(c), [f.want(a), f.want(b), f.want(h), f.want(z)], "after reconnecting")
        f.mock.on_key(a, garbage(b"SERVER_ERROR out of memory\r\n"), times=1)
        got = send_batch(c)
        eq(got[2], f.want(h), "the healthy server's reply amid the error")
        for r in got[:2] + got[3:]:
            eq(r, b"SERVER_ERROR out of memory\r\n", "every joined member gets the error")
        eq(send_batch(c), [f.want(a), f.want(b), f.want(h), f.want(z)], "after the error")
        f.mock.on_key(a, delay(1000), times=1)
        t0 = time.monotonic()
        got = send_batch(c)
        eq(got[2], f.want(h), "the healthy server's reply amid the timeouts")
        for r in got[:2] + got[3:]:
            check(f.is_error(r, "timeout"), "every joined member times out: %r", r)
        time.sleep(max(0.0, t0 + 1.2 - time.monotonic()))
        eq(send_batch(c), [f.want(a), f.want(b), f.want(h), f.want(z)], "after the late reply")
        check(quiet(c), "extra bytes after the replies: %r", bytes(c.buf))


def slow_reply(f):
    reset(f)
    k = f.on_mock[3]
    h = f.healthy()[0]
    late_ms = 1000
    f.mock.on_key(k, delay(late_ms), times=1)
    with f.client() as c:
        t0 = time.monotonic()
        r = f.get(c, k, timeout=3)
        took = time.monotonic() - t0
        check(f.is_error(r, "timeout"), "a slow server gives a timeout error, got %r", r)
        check(took < patience(SLACK * TIMEOUT_MS / 1000.0), "timeout reply after %.3fs", took)
        check(took >= 0.8 * TIMEOUT_MS / 1000.0, "timeout reply too early, after %.3fs", took)
        eq(f.get(c, h), f.want(h), "healthy key right after the timeout")
        # Past the late reply: it went to nobody, and the next replies are their own.
        time.sleep(max(0.0, t0 + late_ms / 1000.0 + 0.2 - time.monotonic()))
        check(any(r.action.kind == "delay" for r in f.mock.requests()),
              "the mock never saw the slow request")
        eq(f.get(c, h), f.want(h), "healthy key after the late reply")
        eq(f.get(c, k), f.want(k), "the slow server's key after the late reply")
        check(quiet(c), "the late reply leaked: %r", bytes(c.buf))


@R.test
def slow_reply_times_out_memcache(env):
    slow_reply(env.mc)


@R.test
def slow_reply_times_out_redis(env):
    slow_reply(env.rd)


def never_answers(f):
    reset(f)
    k = f.on_mock[4]
    f.mock.on_key(k, silent())
    with f.client() as c:
        conn = None
        for _ in range(2):
            t0 = time.monotonic()
            r = f.get(c, k, timeout=3)
            took = time.monotonic() - t0
            check(f.is_error(r), "a silent server gives an error, got %r", r)
            check(took < patience(SLACK * TIMEOUT_MS / 1000.0), "error after %.3fs", took)
            conn = conn or f.mock_conn_of_last(k)
            h = f.healthy()[1]
            eq(f.get(c, h), f.want(h), "healthy key beside a silent server")
        # A connection stuck behind an unanswered request is given up, not kept forever.
        check(f.mock.wait_for(lambda: f.mock.closed_by_peer(conn), timeout=patience(8 * TIMEOUT_MS / 1000.0)),
              "the proxy kept a hung server connection open")
        f.mock.reset()
        deadline = time.monotonic() + patience(3)
        while True:
            r = f.get(c, k, timeout=3)
            if r == f.want(k):
                break
            check(time.monotonic() < deadline, "the server's keys did not recover: %r", r)
            time.sleep(0.1)
    check(f.proxy.proc.alive(), "the proxy died")
    f.proxy.stats()     # the stats port answers: the process does not hang


@R.test
def silent_server_times_out_memcache(env):
    never_answers(env.mc)


@R.test
def silent_server_times_out_redis(env):
    never_answers(env.rd)


@R.test
def server_closing_on_receipt(env):
    for f in env.both():
        fault_then_recover(f, close())


@R.test
def half_reply_then_stall(env):
    # The header arrives, the rest never does: the timeout answers (the reply was not
    # streamed yet because nothing complete arrived) and the hung connection is dropped.
    for f, cut in ((env.mc, 9), (env.rd, 2)):
        reset(f)
        k = f.on_mock[5]
        f.mock.on_key(k, half_stall(cut=cut), times=1)
        with f.client() as c:
            t0 = time.monotonic()
            r = f.get(c, k, timeout=3)
            check(f.is_error(r, "timeout"), "got %r", r)
            check(time.monotonic() - t0 < patience(SLACK * TIMEOUT_MS / 1000.0), "late timeout reply")
            h = f.healthy()[0]
            eq(f.get(c, h), f.want(h))
        reset(f)


# ---------------------------------------------------------------- refused connections

@R.test
def refused_server_then_back(env):
    mc = [Memcached.start() for _ in range(2)]
    dead_port = free_port()
    dead = type("Dead", (), {"hostport": lambda self: "127.0.0.1:%d" % dead_port})()
    servers = server_lines(mc + [dead], NAMES)
    proxy = GProxy({"p": {"hash": "fnv1a_64", "distribution": "ketama", "timeout": TIMEOUT_MS,
                          "auto_eject_hosts": False, "servers": servers}})
    env.proxies.append(proxy)
    back = None
    try:
        keys = [unique(b"r") + b"-%d" % i for i in range(60)]
        failed = []
        with proxy.client(timeout=5) as c:
            for k in keys:
                t0 = time.monotonic()
                r = c.mc_store(b"set", k, value_of(k))
                took = time.monotonic() - t0
                if r.startswith(b"SERVER_ERROR"):
                    failed.append(k)
                    check(took < patience(2.0), "refused server: error after %.3fs", took)
                else:
                    eq(r, b"STORED\r\n")
            own = owners(mc, keys)
            check(all(own[k] == [] for k in failed), "a failed set was stored")
            check(all(len(own[k]) == 1 for k in keys if k not in failed), "a set was lost")
            check(5 <= len(failed) <= 40, "%d of 60 keys on the dead server", len(failed))
            # It comes back on the same port: its keys work again within a few seconds.
            back = Memcached.start(port=dead_port)
            t0 = time.monotonic()
            while True:
                r = c.mc_store(b"set", failed[0], value_of(failed[0]))
                if r == b"STORED\r\n":
                    break
                check(r.startswith(b"SERVER_ERROR"), "unexpected %r", r)
                check(time.monotonic() - t0 < patience(5), "no reconnect within %.0f s" % patience(5))
                time.sleep(0.05)
            for k in failed:
                eq(c.mc_store(b"set", k, value_of(k)), b"STORED\r\n")
            eq(sorted(back.get_many(failed)), sorted(failed), "keys on the returned server")
            for k in keys[:10]:
                c.send(b"get " + k + b"\r\n")
                eq(mc_one(c), mc_value_reply(k, value_of(k)))
    finally:
        if back:
            back.stop()
        for b in mc:
            b.stop()


# ---------------------------------------------------------------- multi-key requests

@R.test
def multiget_spanning_a_faulty_server_memcache(env):
    f = env.mc
    for action in (garbage(b"HELLO\r\n"), half_close(cut=20), delay(1000), close()):
        reset(f)
        m = f.on_mock[6]
        h1, h2 = f.on_real[0][2], f.on_real[1][2]
        f.mock.on_key(m, action, times=1)
        with f.client() as c:
            c.send(b"get %s %s %s\r\n" % (h1, m, h2))
            r = c.read_line(timeout=3)
            check(r.startswith(b"SERVER_ERROR"), "%s: a multi-get with a broken part: %r",
                  action, r)
            check(quiet(c), "%s: bytes after the error: %r", action, bytes(c.buf))
            if action.kind == "delay":
                time.sleep(1.0)
            got = c.mc_get(b"get", h1, m, h2)
            eq(got, [(x, 0, value_of(x), None) for x in (h1, m, h2)], "after %s" % action)


@R.test
def multiget_spanning_a_faulty_server_redis(env):
    f = env.rd
    for action in (garbage(b"?x\r\n"), half_close(cut=8), delay(1000), close()):
        reset(f)
        m = f.on_mock[6]
        h1, h2 = f.on_real[0][2], f.on_real[1][2]
        f.mock.on_key(m, action, times=1)
        with f.client() as c:
            r = c.rd("MGET", h1, m, h2, timeout=3)
            check(is_err(r), "%s: an MGET with a broken part: %r", action, r)
            check(quiet(c), "%s: bytes after the error: %r", action, bytes(c.buf))
            if action.kind == "delay":
                time.sleep(1.0)
            eq(c.rd("MGET", h1, m, h2), [value_of(x) for x in (h1, m, h2)], "after %s" % action)


@R.test
def pipeline_with_a_slow_server_keeps_order(env):
    for f in env.both():
        reset(f)
        slow, fast = f.on_mock[7], f.on_mock[8]
        h = f.healthy()
        f.mock.on_key(slow, delay(TIMEOUT_MS // 2), times=1)
        seq = [h[0], slow, h[1], h[2], fast, h[3], h[0]]
        with f.client() as c:
            for rnd in range(2):
                if f.redis:
                    c.send(b"".join(resp_encode("GET", k) for k in seq) +
                           resp_encode("SET", h[0], value_of(h[0])) + resp_encode("GET", slow))
                    got = [c.read_resp(timeout=3) for _ in range(len(seq) + 2)]
                    eq(got, [value_of(k) for k in seq] + ["OK", value_of(slow)])
                else:
                    c.send(b"".join(b"get " + k + b"\r\n" for k in seq) +
                           b"set %s 0 0 %d\r\n%s\r\n" % (h[0], len(value_of(h[0])), value_of(h[0])) +
                           b"get " + slow + b"\r\n")
                    got = [mc_one(c, timeout=3) for _ in range(len(seq))]
                    got += [c.read_line(timeout=3), mc_one(c, timeout=3)]
                    eq(got, [mc_value_reply(k, value_of(k)) for k in seq] +
                       [b"STORED\r\n", mc_value_reply(slow, value_of(slow))])
                f.mock.on_key(slow, delay(TIMEOUT_MS // 2), times=1)


# ---------------------------------------------------------------- backpressure

class TrickleServer:
    """A memcached stand-in that answers `get k` with a value of `size` bytes sent in
    `pieces` parts `gap` seconds apart: a server that is slow to send a reply but never
    silent for long (a real one under load, which cannot be produced on demand)."""

    def __init__(self, size, pieces, gap):
        rng = random.Random(size)
        self.value = bytes(rng.getrandbits(8) for _ in range(256)) * (size // 256)
        self.pieces, self.gap = pieces, gap
        self.ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.stop_ev = threading.Event()
        self.conns = []
        self.sent_at = []       # monotonic time of each part sent
        threading.Thread(target=self.accept, daemon=True).start()

    def send(self, s, data):
        s.sendall(data)
        self.sent_at.append(time.monotonic())

    def longest_silence(self):
        t = self.sent_at
        return max((b - a for a, b in zip(t, t[1:])), default=0.0)

    def accept(self):
        self.ls.settimeout(0.2)
        while not self.stop_ev.is_set():
            try:
                s, _ = self.ls.accept()
            except (socket.timeout, OSError):
                continue
            self.conns.append(s)
            threading.Thread(target=self.serve, args=(s,), daemon=True).start()

    def serve(self, s):
        buf = b""
        s.settimeout(0.2)
        while not self.stop_ev.is_set():
            try:
                data = s.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data:
                return
            buf += data
            while b"\r\n" in buf:
                line, buf = buf.split(b"\r\n", 1)
                parts = line.split()
                if not parts or parts[0] != b"get":
                    s.sendall(b"ERROR\r\n")
                    continue
                for k in parts[1:]:
                    self.send(s, b"VALUE %s 0 %d\r\n" % (k, len(self.value)))
                    step = len(self.value) // self.pieces + 1
                    for off in range(0, len(self.value), step):
                        if self.stop_ev.wait(self.gap):
                            return
                        self.send(s, self.value[off:off + step])
                    self.send(s, b"\r\n")
                self.send(s, b"END\r\n")

    def close(self):
        self.stop_ev.set()
        self.ls.close()
        for s in self.conns:
            s.close()


@R.test(timeout=90)
def value_arriving_slowly_is_not_a_timeout(env):
    """A server sends a 1 MB value in 16 parts 150 ms apart (2.4 s in all) through a pool
    with timeout 1 s: the client gets the value whole (the server is answering all
    along; the timeout is for a server that falls silent), no timeout is counted, the
    server is not marked down (silent_server_times_out_* show a silent one still does).
    The property holds for a server never silent for a timeout: an attempt in which the
    box kept the test's server from sending for half the timeout proves nothing and is
    made again (at most 3 attempts)."""
    timeout_ms = 1000
    for attempt in range(3):
        srv = TrickleServer(1 << 20, 16, 0.15)
        proxy = GProxy({"p": {"timeout": timeout_ms, "auto_eject_hosts": True,
                              "server_failure_limit": 1,
                              "servers": ["127.0.0.1:%d:1 trickle" % srv.port]}})
        env.proxies.append(proxy)
        try:
            got = []
            with proxy.client(timeout=30) as c:
                for i in range(2):
                    c.send(b"get slow%d\r\n" % i)
                    try:
                        got.append((i, mc_one(c, timeout=30)))
                    except EOFError:
                        got.append((i, None))
                        break
            st = proxy.stats()["p"]
            silence = srv.longest_silence()
            if silence >= timeout_ms / 2000.0:
                print("  attempt %d: the test's server was kept silent %.0f ms (timeout %d ms): "
                      "inconclusive, again" % (attempt + 1, silence * 1000, timeout_ms))
                continue
            for i, r in got:
                want = b"VALUE slow%d 0 %d\r\n" % (i, len(srv.value)) + srv.value + b"\r\nEND\r\n"
                check(r == want, "the slowly sent value, whole: got %s", "nothing (closed)"
                      if r is None else "%d bytes %r..." % (len(r), r[:40]))
            eq(len(got), 2, "both values read")
            check(srv.sent_at[-1] - srv.sent_at[0] > timeout_ms / 1000.0,
                  "the reply took longer than the timeout (%.2f s)",
                  srv.sent_at[-1] - srv.sent_at[0])
            eq(st["trickle"]["server_timedout"], 0, "server_timedout")
            eq(st["server_ejects"], 0, "server_ejects")
            return
        finally:
            srv.close()
            proxy.stop()
    raise AssertionError("the box kept the test's server silent in all 3 attempts")


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@R.test(timeout=120)     # 800 MB through the proxy: its own budget, not the file's 40 s
def backpressure_bounds_memory_of_a_client_that_does_not_read(env):
    mc = [Memcached.start() for _ in range(2)]
    limit = 1 << 20
    proxy = GProxy({"bp": {"hash": "fnv1a_64", "distribution": "ketama", "timeout": 10000,
                           "auto_eject_hosts": False, "servers": server_lines(mc, NAMES)}},
                   glob={"client_output_limit": limit, "drain_timeout": 1000})
    env.proxies.append(proxy)
    n, size = 8000, 100 * 1024
    hog = None
    keys = [unique(b"bp") + b"-%d" % i for i in range(4)]
    vals = [bytes([65 + i]) * (size - 16) + os.urandom(8).hex().encode() for i in range(4)]
    replies = [mc_value_reply(k, v) for k, v in zip(keys, vals)]
    total = sum(len(replies[i % 4]) for i in range(n))
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], rss_kb(proxy.proc.pid))
            except OSError:
                return
            if peak[0] > (3 << 20) and hog is not None:    # 3 GB: spare the machine
                hog.close()
                return
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        with proxy.client(timeout=10) as c:
            for k, v in zip(keys, vals):
                eq(c.mc_store(b"set", k, v), b"STORED\r\n")
        base = rss_kb(proxy.proc.pid)
        sampler.start()
        hog = socket.create_connection(proxy.addr(), 10)
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        hog.settimeout(patience(30))     # a bound against a hang: no byte for this long
        sent = []

        def send_all():
            try:
                hog.sendall(b"".join(b"get " + keys[i % 4] + b"\r\n" for i in range(n)))
                sent.append(True)
            except OSError as e:
                sent.append(e)

        sender = threading.Thread(target=send_all, daemon=True)
        sender.start()
        # The hog does not read: other clients are served meanwhile. (Bounds are
        # loose: the sanitizer build on a loaded 2-core machine is slow, and the
        # point is that they are served at all, not how fast.)
        # At least 3 s and at least 5 round trips, however slow each one is: each one
        # answered byte-exact within the hang bound is the outcome, not their rate.
        t_end = time.monotonic() + 3.0
        served = 0
        with proxy.client(timeout=5) as c:
            while time.monotonic() < t_end or served < 5:
                k = keys[served % 4]
                t0 = time.monotonic()
                c.send(b"get " + k + b"\r\n")
                eq(mc_one(c), replies[served % 4], "another client during backpressure")
                check(time.monotonic() - t0 < patience(5.0), "another client waited %.2fs",
                      time.monotonic() - t0)
                served += 1
        stalled_peak = peak[0]
        # Now the hog reads: every reply, in order, compared as a stream. No deadline on
        # the whole read (800 MB through the sanitizer build on a loaded machine is slow):
        # each recv is bounded by the socket timeout, the test by the runner's alarm.
        buf = bytearray(1 << 20)
        mv = memoryview(buf)
        i = off = got = 0
        while i < n:
            try:
                m = hog.recv_into(buf)
            except socket.timeout:
                raise AssertionError("no reply byte for %.0f s after %d of %d replies" % (
                    hog.gettimeout(), i, n))
            check(m > 0, "the proxy closed the hog after %d of %d replies", i, n)
            got += m
            p = 0
            while p < m:
                want = replies[i % 4]
                take = min(len(want) - off, m - p)
                if mv[p:p + take] != want[off:off + take]:
                    raise AssertionError("reply %d differs at byte %d: %r" % (
                        i, off, bytes(mv[p:p + min(take, 60)])))
                p += take
                off += take
                if off == len(want):
                    i += 1
                    off = 0
                    check(i < n or p == m, "bytes after the last reply")
        sender.join(patience(10))
        check(sent == [True], "the hog's requests were not all sent: %r", sent)
        hog.settimeout(0.3)
        try:
            extra = hog.recv(100)
        except socket.timeout:
            extra = b""
        eq(extra, b"", "bytes after the last reply")
        hog.close()
        stop.set()
        sampler.join(2)
        print("  backpressure: %d replies, %.0f MB total; proxy RSS %.0f MB before, peak "
              "%.0f MB while the client did not read, %.0f MB overall; %d other round trips "
              "in >= 3 s" % (n, total / 1e6, base / 1024.0, stalled_peak / 1024.0,
                          peak[0] / 1024.0, served))
        check(peak[0] * 1024 < min(1 << 30, total // 2), "proxy RSS peaked at %d kB for %d "
              "bytes of replies", peak[0], total)
    finally:
        stop.set()
        if hog is not None:
            hog.close()
        proxy.stop()
        for b in mc:
            b.stop()


# ---------------------------------------------------------------- limits and shutdown

@R.test
def client_connections_limit(env):
    mc = Memcached.start()
    limit = 3
    proxy = GProxy({"cl": {"timeout": 1000, "client_connections": limit,
                           "servers": ["%s:1" % mc.hostport()]}}, workers=2)
    env.proxies.append(proxy)
    clients = []
    try:
        k = unique(b"cl")
        for i in range(limit):
            c = proxy.client(timeout=5)
            clients.append(c)
            eq(c.mc_store(b"set", k, b"%d" % i), b"STORED\r\n", "client %d of %d" % (i + 1, limit))
        extra = proxy.client(timeout=5)
        try:
            try:
                extra.send(b"get " + k + b"\r\n")
            except OSError:
                pass
            check(extra.closed(2.0), "connection %d was not closed (limit %d)", limit + 1, limit)
        finally:
            extra.close()
        for i, c in enumerate(clients):
            eq(c.mc_get(b"get", k), [(k, 0, b"%d" % (limit - 1), None)], "client %d" % (i + 1))
        # A slot freed is a slot given again.
        clients.pop().close()
        deadline = time.monotonic() + patience(3)
        while True:
            c = proxy.client(timeout=5)
            try:
                c.send(b"get " + k + b"\r\n")
                eq(c.read_values(timeout=2), [(k, 0, b"%d" % (limit - 1), None)])
                clients.append(c)
                break
            except (EOFError, OSError):
                c.close()
                check(time.monotonic() < deadline, "a freed slot was not given again")
                time.sleep(0.1)
    finally:
        for c in clients:
            c.close()
        proxy.stop()
        mc.stop()


@R.test
def graceful_shutdown_answers_in_flight_requests(env):
    mock = MockBackend.start()
    mc = Memcached.start()
    drain_ms = 4000
    proxy = GProxy({"gs": {"hash": "fnv1a_64", "distribution": "ketama", "timeout": 5000,
                           "auto_eject_hosts": False,
                           "servers": ["%s:1 a" % mock.hostport(), "%s:1 b" % mc.hostport()]}},
                   glob={"drain_timeout": drain_ms}, workers=2)
    env.proxies.append(proxy)
    try:
        keys = [unique(b"gs") + b"-%d" % i for i in range(30)]
        with proxy.client() as c:
            for k in keys:
                eq(c.mc_store(b"set", k, value_of(k)), b"STORED\r\n")
        slow = next(k for k in keys if k in mock.received_keys())
        mock.on_key(slow, delay(1500), times=1)
        idle = proxy.client()
        c = proxy.client()
        c.send(b"get " + slow + b"\r\n")
        check(mock.wait_for(lambda: any(r.action and r.action.kind == "delay"
                                        for r in mock.requests())), "request not in flight")
        t0 = time.monotonic()
        os.kill(proxy.proc.pid, signal.SIGTERM)
        refused = False
        while time.monotonic() - t0 < patience(1.0):
            try:
                socket.create_connection(proxy.addr(), 0.5).close()
                time.sleep(0.02)
            except (ConnectionRefusedError, ConnectionResetError):
                # reset: the probe's handshake landed in a listener's queue as it
                # closed (the kernel resets those); either way it is not served
                refused = True
                break
        check(refused, "new connections still accepted 1 s after SIGTERM")
        check(proxy.proc.alive() and not c.buf, "the proxy did not wait for the in-flight request")
        try:
            got = mc_one(c, timeout=5)
        except EOFError:
            rc = proxy.proc.popen.wait(5)
            if uaf_signature(proxy_output(proxy), rc):
                raise AssertionError(BUG_SERVER_UAF + "; here another worker died before the in-flight "
                           "reply was sent")
            raise
        eq(got, mc_value_reply(slow, value_of(slow)), "the in-flight reply")
        check(idle.closed(2.0), "an idle client was not closed by the shutdown")
        try:
            rc = proxy.proc.popen.wait(drain_ms / 1000.0 + patience(2))
        except Exception:
            raise AssertionError("the proxy did not exit within the drain timeout")
        took = time.monotonic() - t0
        if rc != 0 and uaf_signature(proxy_output(proxy), rc):
            raise AssertionError(BUG_SERVER_UAF + "; the in-flight reply was answered, the exit was not "
                       "clean (status %s)" % rc)
        eq(rc, 0, "exit status")
        check(took < drain_ms / 1000.0 + patience(1), "exit after %.2fs", took)
        c.close()
        idle.close()
    finally:
        proxy.stop()
        mock.stop()
        mc.stop()


# ---------------------------------------------------------------- client garbage

def mc_garbage(rng):
    valid = [b"get k\r\n", b"set k 0 0 5\r\nhello\r\n", b"gets a b c\r\n", b"delete k\r\n",
             b"incr n 5\r\n", b"touch k 10\r\n", b"cas k 0 0 1 99\r\nx\r\n", b"version\r\n",
             b"gat 10 k\r\n", b"mg k v\r\n", b"ms k 2\r\nhi\r\n", b"stats\r\n"]
    kind = rng.randrange(6)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
    if kind == 1:            # printable tokens and line ends
        toks = [b"get", b"set", b"cas", b"0", b"-1", b"18446744073709551616", b"noreply",
                b"\r\n", b"\n", b" ", b"\x00", b"k" * rng.choice((1, 250, 251, 5000)),
                b"4294967295", b"99999999999999999999"]
        return b"".join(rng.choice(toks) + (b" " if rng.random() < 0.5 else b"")
                        for _ in range(rng.randrange(1, 20)))
    if kind == 2:            # a valid request with bytes flipped
        b = bytearray(rng.choice(valid) * rng.randrange(1, 4))
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 3:            # a valid request cut short
        b = rng.choice(valid)
        return b[:rng.randrange(1, len(b))]
    if kind == 4:            # lengths that lie
        n = rng.choice((b"-1", b"0", b"4294967296", b"1048577", b"2", b"abc"))
        return b"set k 0 0 " + n + b"\r\n" + b"x" * rng.randrange(0, 8) + b"\r\nget k\r\n"
    return b" ".join([b"get"] + [b"k%d" % i for i in range(rng.randrange(1, 3000))]) + b"\r\n"


def rd_garbage(rng):
    valid = [resp_encode("GET", "k"), resp_encode("SET", "k", "v"), resp_encode("MGET", "a", "b"),
             resp_encode("DEL", "a", "b", "c"), resp_encode("PING"), b"PING\r\n",
             resp_encode("EVAL", "return 1", "1", "k"), resp_encode("MSET", "a", "1", "b", "2"),
             resp_encode("SUBSCRIBE", "ch"), resp_encode("INFO")]
    kind = rng.randrange(6)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
    if kind == 1:
        toks = [b"*", b"$", b"-1", b"0", b"3", b"2147483648", b"99999999999", b"\r\n", b"GET",
                b"k", b":", b"+", b"-", b"\n", b"*-5", b"$-2", b"\x00"]
        return b"".join(rng.choice(toks) for _ in range(rng.randrange(1, 30)))
    if kind == 2:
        b = bytearray(rng.choice(valid) * rng.randrange(1, 4))
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 3:
        b = rng.choice(valid)
        return b[:rng.randrange(1, len(b))]
    if kind == 4:
        return b"*2\r\n$3\r\nGET\r\n$%s\r\nk\r\n" % rng.choice(
            (b"-1", b"0", b"5", b"536870913", b"abc", b"")) + resp_encode("PING")
    return resp_encode("MGET", *["k%d" % i for i in range(rng.randrange(1, 3000))])


def garbage_clients(f, gen, seed, count=400):
    rng = random.Random(seed)
    reset(f)
    h = f.healthy()
    for i in range(count):
        data = gen(rng)
        try:
            with f.client(timeout=3) as c:
                try:
                    c.send(data)
                    c.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                # The proxy answers what it can and closes; it must not wait forever.
                check(c.closed(3.0), "case %d %r: the proxy did not close after EOF",
                      i, data[:80])
        except ConnectionRefusedError:
            raise AssertionError("case %d %r: the proxy stopped listening" % (i, data[:80]))
        if i % 50 == 49 or i == count - 1:
            check(f.proxy.proc.alive(), "the proxy died after case %d %r:\n%s",
                  i, data[:80], f.proxy.proc.log_tail())
            with f.client() as c:
                for k in h:
                    eq(f.get(c, k), f.want(k), "a normal client after case %d" % i)


@R.test
def random_client_garbage_memcache(env):
    garbage_clients(env.mc, mc_garbage, 1234)


@R.test
def random_client_garbage_redis(env):
    garbage_clients(env.rd, rd_garbage, 4321)


# ---------------------------------------------------------------- last: clean exit

@R.test
def every_proxy_exits_cleanly_without_sanitizer_reports(env):
    """Last: stop every proxy this file started (SIGTERM), each must exit 0 and neither
    ASan nor UBSan may have said anything (the sanitizer build prints to stderr)."""
    bad = []
    known = []
    for p in env.proxies:
        rc = p.stop()
        out = proxy_output(p)
        marks = [m for m in SANITIZER_MARKS if m in out]
        if not marks and rc in (0, None):
            continue
        if uaf_signature(out, rc):
            known.append(os.path.basename(p.conf_path))
            continue
        if marks:
            i = min(out.find(m) for m in marks)
            bad.append("%s: %s" % (p.conf_path, out[max(0, i - 200):i + 1500].decode(
                "utf-8", "replace")))
        bad.append("%s exited with %s" % (p.conf_path, rc))
    check(not bad, "\n".join(bad))
    if known:
        raise AssertionError("%s (%d of %d proxies: %s)" % (BUG_SERVER_UAF, len(known), len(env.proxies),
                                                  " ".join(known)))


if __name__ == "__main__":
    R.main(Env)

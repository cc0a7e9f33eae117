"""test_tls.py: TLS on both sides of the proxy, against memcached -Z and redis-server --tls-port.

Certificates are made here with the openssl CLI (a CA, a second CA nobody trusts, the proxy's
certificate and its replacement, a backend certificate, a client certificate, an expired one).
One proxy runs every pool below; the rotation tests start their own.

  mc_both / rd_both       TLS clients, TLS backends (redis requires the proxy's client
                          certificate): set/get, 2,000 pipelined requests per connection,
                          handshakes counted on both sides, backend sessions resumed
  mc_front / rd_front     TLS clients, plaintext backends
  mc_back                 plaintext clients, TLS backend
  mc_auth                 client certificates required: with one, without one
  mc_wrongca              a backend whose certificate another CA signed: 'SERVER_ERROR tls:
                          certificate verify failed', a server failure (down), other pools served
  rd_nocert               a redis backend that requires a client certificate the pool lacks
  plaintext_to_tls_port   closed at once, not one byte back
  tls_client_on_plain     a TLS client on a plaintext pool hangs nothing
  garbage_after_handshake the connection closes, the proxy counts a protocol error
  stalled_handshake       closed after tls_handshake_timeout, counted
  handshake_churn         200 handshake-and-close clients: no fd and no TLS connection left
  real_clients            redis-cli --tls, redis-py ssl=True, pymemcache tls_context
  rotation_by_sighup      new connections present the new serial, old ones keep working;
                          a certificate that does not match its key fails the reload
  reload_turning_on_tls   a reload that turns on tls + client_auth closes the connected
                          plaintext client (its next request gets no reply, is not run,
                          the connection closes: tls_reload_closed); a TLS client with a
                          certificate works; a reload that changes the ca closes the TLS
                          client the new ca refuses, one that changes nothing keeps it
  reload_..._blocked_client  a plaintext Redis client blocked in BLPOP, a subscriber and an
                          idle one: all three closed by the reload that turns tls on
  test_conf_finds_errors  ringleader -t: unreadable file, key/cert mismatch, expired, with
                          file:line:column
  clean_exit              the proxy exits 0 (under ASan: no leak)
"""

import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Proc, Proxy, Raw, Runner, Skip, StartError, binary, check, eq,  # noqa: E402
                     free_port, http, mc_values_len, resp_encode, sanitized, tmpdir, unique,
                     yaml_scalar, _start_with_retry)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
# tls_handshake_timeout of the file's proxy: every client handshakes under it, and a
# Python client's handshake beside a loaded machine's other work took more than 1 s
HANDSHAKE_S = 3
R = Runner("test_tls", per_test_timeout=60, total_timeout=240)


# ---------------------------------------------------------------- certificates

def openssl(*args):
    r = subprocess.run(["openssl"] + list(args), capture_output=True, timeout=30)
    if r.returncode != 0:
        raise AssertionError("openssl %s: %s" % (" ".join(args[:3]), r.stderr[-400:]))
    return r.stdout


class Certs:
    """Keys and certificates in the test's tmpdir, each made by the openssl CLI."""

    def __init__(self):
        self.dir = os.path.join(tmpdir(), "pki")
        os.makedirs(self.dir, exist_ok=True)
        self.ca = self.make_ca("ca", "ringleader test CA")
        self.evil_ca = self.make_ca("evil-ca", "a CA nobody trusts")
        san = "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:cache.internal"
        self.proxy = self.make("proxy", "ca", 4001, san)
        self.proxy2 = self.make("proxy2", "ca", 4002, san)
        self.backend = self.make("backend", "ca", 4003, san)
        self.evil = self.make("evil", "evil-ca", 4004, san)
        self.client = self.make("client", "ca", 4005, "extendedKeyUsage=clientAuth")
        self.expired = self.make("expired", "ca", 4006, san, days="-1")

    def path(self, name):
        return os.path.join(self.dir, name)

    def make_ca(self, name, cn):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", self.path(name + ".key"), "-out", self.path(name + ".crt"),
                "-days", "30", "-subj", "/CN=" + cn)
        return self.path(name + ".crt")

    def make(self, name, ca, serial, ext, days="30"):
        """(cert path, key path) of a certificate with that serial signed by ca."""
        key, csr, crt = (self.path(name + x) for x in (".key", ".csr", ".crt"))
        extfile = self.path(name + ".ext")
        with open(extfile, "w") as f:
            f.write(ext + "\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", key, "-out", csr, "-subj", "/CN=" + name)
        openssl("x509", "-req", "-in", csr, "-CA", self.path(ca + ".crt"), "-CAkey",
                self.path(ca + ".key"), "-set_serial", str(serial), "-days", days,
                "-extfile", extfile, "-out", crt)
        return crt, key


def client_ctx(certs, cert=None):
    ctx = ssl.create_default_context(cafile=certs.ca)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


class TlsRaw(Raw):
    """harness.Raw over TLS: the same reading helpers on an ssl socket."""

    def __init__(self, addr, ctx, timeout=10.0, server_hostname="localhost", session=None):
        self.addr = addr
        self.timeout = timeout
        raw = socket.create_connection(addr, timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = ctx.wrap_socket(raw, server_hostname=server_hostname, session=session)
        self.buf = bytearray()
        self.eof = False

    def pipeline(self, data, want, timeout=30):
        """Raw.pipeline sends from a second thread, which an ssl socket does not allow
        (one SSL object, two threads). The pipelines here are ~100 KB each way, far below
        what the loopback socket buffers hold, so sending all first cannot deadlock."""
        self.send(data)
        got = self.read_exact(len(want), timeout=timeout)
        if got != want:
            i = next(j for j in range(len(want)) if got[j] != want[j])
            raise AssertionError("pipeline reply differs at byte %d: got %r want %r" % (
                i, got[max(0, i - 60):i + 60], want[max(0, i - 60):i + 60]))

    def _fill(self, deadline):
        try:
            return Raw._fill(self, deadline)
        except ssl.SSLError as e:   # an alert from the proxy ends the stream like an EOF
            self.eof = True
            raise EOFError("TLS error: %s" % e)


# ---------------------------------------------------------------- backends

def memcached_argv(port, cert=None):
    argv = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1", "-m", "64"]
    if cert is not None:
        argv += ["-Z", "-o", "ssl_chain_cert=%s,ssl_key=%s" % cert]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    return argv


def redis_argv(port, certs=None, auth_clients="no"):
    argv = ["redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--dir", tmpdir(), "--logfile", ""]
    if certs is None:
        return argv + ["--port", str(port)]
    return argv + ["--port", "0", "--tls-port", str(port), "--tls-cert-file", certs.backend[0],
                   "--tls-key-file", certs.backend[1], "--tls-ca-cert-file", certs.ca,
                   "--tls-auth-clients", auth_clients]


class Backend:
    """A server process on port (argv from memcached_argv / redis_argv), listening."""

    def __init__(self, name, port, argv):
        self.port = port
        self.proc = Proc("%s-%d" % (name, port), argv)
        try:
            self.proc.wait_listening(port)
        except StartError:
            self.proc.stop()
            raise

    @classmethod
    def start(cls, name, argv_of):
        return _start_with_retry(lambda port: cls(name, port, argv_of(port)))

    def hostport(self):
        return "127.0.0.1:%d" % self.port

    def stop(self):
        self.proc.stop()


# ---------------------------------------------------------------- the proxy

def yaml_tree(doc, indent=0):
    """YAML text of nested dicts / lists of scalars (harness.yaml_dump is one level)."""
    out = []
    pad = "  " * indent
    for k, v in doc.items():
        if isinstance(v, dict):
            out.append("%s%s:" % (pad, k))
            out.append(yaml_tree(v, indent + 1))
        elif isinstance(v, (list, tuple)):
            out.append("%s%s:" % (pad, k))
            out.extend("%s - %s" % (pad, yaml_scalar(x)) for x in v)
        else:
            out.append("%s%s: %s" % (pad, k, yaml_scalar(v)))
    return "\n".join(x for x in out if x)


def dump(doc):
    return yaml_tree(doc) + "\n"


class Env(harness.Env):
    LOG_LINES = 40

    def __init__(self):
        for tool in ("openssl", "memcached", "redis-server"):
            if shutil.which(tool) is None:
                raise Skip("%s is not installed" % tool)
        self.certs = c = Certs()
        self.mc_tls = Backend.start("memcached-tls", lambda p: memcached_argv(p, c.backend))
        self.mc_evil = Backend.start("memcached-evil", lambda p: memcached_argv(p, c.evil))
        self.mc_plain = Backend.start("memcached", memcached_argv)
        self.rd_tls = Backend.start("redis-tls", lambda p: redis_argv(p, c, "yes"))
        self.rd_plain = Backend.start("redis", redis_argv)
        self.backends = [self.mc_tls, self.mc_evil, self.mc_plain, self.rd_tls, self.rd_plain]
        listen = {"cert": c.proxy[0], "key": c.proxy[1]}
        to_backend = {"ca": c.ca}
        with_cert = {"ca": c.ca, "server_name": "cache.internal", "cert": c.client[0],
                     "key": c.client[1]}

        def pool(servers, redis=False, **extra):
            p = {"timeout": 3000, "auto_eject_hosts": False,
                 "servers": ["%s:1 s%d" % (s.hostport(), i) for i, s in enumerate(servers)]}
            if redis:
                p["redis"] = True
            p.update(extra)
            return p
        self.pools = {
            "mc_both": pool([self.mc_tls], tls=listen, server_tls=to_backend),
            "mc_front": pool([self.mc_plain], tls=listen),
            "mc_back": pool([self.mc_tls], server_tls=dict(to_backend, server_name="cache.internal")),
            "mc_auth": pool([self.mc_plain], tls=dict(listen, ca=c.ca, client_auth=True)),
            "mc_wrongca": pool([self.mc_evil], server_tls=to_backend, on_down="error",
                               server_failure_limit=1, server_retry_timeout=60000),
            "rd_both": pool([self.rd_tls], redis=True, tls=listen, server_tls=with_cert),
            "rd_front": pool([self.rd_plain], redis=True, tls=listen),
            "rd_nocert": pool([self.rd_tls], redis=True, server_tls=to_backend),
            "mc_plainpool": pool([self.mc_plain]),
            "rd_plainpool": pool([self.rd_plain], redis=True),
        }
        self.proxy = Proxy(self.pools, dump=dump, glob={"tls_handshake_timeout": HANDSHAKE_S,
                                                        "stream_threshold": 4096})

    def ctx(self, cert=None):
        return client_ctx(self.certs, cert)

    def tls(self, pool, cert=None, **kw):
        return TlsRaw(self.proxy.addr(pool), self.ctx(cert), **kw)

    def stats(self):
        return self.proxy.stats()


def server_stats(st, pool):
    return next(v for v in st[pool].values() if isinstance(v, dict))


def wait_for(pred, what, timeout=5.0):
    timeout = patience(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("%s: not within %.1f s" % (what, timeout))


def stats_when(env, pred, timeout=5.0):
    """env.stats() once pred(stats) holds, or the last one after a bound against a hang:
    the counters are gathered on a 1 s tick that a loaded machine delays, so a fixed
    sleep before reading them is a race."""
    deadline = time.monotonic() + patience(timeout)
    while True:
        st = env.stats()
        if pred(st) or time.monotonic() >= deadline:
            return st
        time.sleep(0.05)


def mc_pipeline(c, n, batch=None):
    """n/2 sets then n/2 gets in one write (or in pipelined batches of `batch` requests,
    each answered before the next); every reply checked in order."""
    pre = unique(b"p")
    req, want = [], []
    for i in range(n // 2):
        k, v = pre + b"-%d" % i, b"v%d" % i
        req.append(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
        want.append(b"STORED\r\n")
    for i in range(n // 2):
        k, v = pre + b"-%d" % i, b"v%d" % i
        req.append(b"get %s\r\n" % k)
        want.append(b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v))
    step = batch or n
    for i in range(0, n, step):
        c.pipeline(b"".join(req[i:i + step]), b"".join(want[i:i + step]))


# memcached 1.6.18 with -Z stops reading a TLS connection that sends it a long pipeline
# (some requests stay unanswered until more bytes arrive; a client straight at it shows the
# same, see docs/tls.md): toward a memcached TLS backend the 2,000 requests go in pipelined
# batches of this many. The client side of the proxy takes the whole pipeline at once
# (mc_front, rd_*).
MC_TLS_BATCH = 100


def rd_pipeline(c, n):
    pre = unique(b"p")
    req, want = [], []
    for i in range(n // 2):
        req.append(resp_encode("SET", pre + b"-%d" % i, b"v%d" % i))
        want.append(b"+OK\r\n")
    for i in range(n // 2):
        v = b"v%d" % i
        req.append(resp_encode("GET", pre + b"-%d" % i))
        want.append(b"$%d\r\n%s\r\n" % (len(v), v))
    c.pipeline(b"".join(req), b"".join(want))


# ---------------------------------------------------------------- both sides, one side

@R.test(ringleader=True)
def mc_tls_both_sides(env):
    with env.tls("mc_both") as c:
        eq(c.sock.version(), "TLSv1.3", "the client's handshake negotiated")
        k = unique(b"both")
        eq(c.mc_store(b"set", k, b"hello"), b"STORED\r\n")
        eq(c.mc_get(b"get", k), [(k, 0, b"hello", None)])
        mc_pipeline(c, 2000, batch=MC_TLS_BATCH)
        # A large value through a pinned connection: a second TLS connection to the same
        # backend, which resumes the session the first one got.
        big = os.urandom(64 << 10)
        eq(c.mc_store(b"set", k, big), b"STORED\r\n", "a streamed 64 KiB set")
        eq(c.mc_get(b"get", k), [(k, 0, big, None)])
    st = stats_when(env, lambda st: st["mc_both"]["tls_handshakes"] >= 1 and
                    server_stats(st, "mc_both")["tls_handshakes"] >= 2 and
                    server_stats(st, "mc_both")["tls_resumptions"] >= 1)
    srv = server_stats(st, "mc_both")
    check(st["mc_both"]["tls_handshakes"] >= 1, "pool handshakes %r" % st["mc_both"])
    check(srv["tls_handshakes"] >= 2, "server handshakes %r" % srv)
    check(srv["tls_resumptions"] >= 1, "the pinned connection resumed: %r" % srv)
    check(srv["tls_connections"] >= 1, "a TLS connection to the backend is open: %r" % srv)


@R.test(ringleader=True)
def rd_tls_both_sides_with_client_cert(env):
    with env.tls("rd_both") as c:
        k = unique(b"rb")
        eq(c.rd("SET", k, b"v1"), "OK")
        eq(c.rd("GET", k), b"v1")
        rd_pipeline(c, 2000)
    st = env.stats()
    check(server_stats(st, "rd_both")["tls_handshakes"] >= 1, "backend handshake counted")


@R.test(ringleader=True)
def tls_on_one_side_only(env):
    k = unique(b"one")
    with env.tls("mc_front") as c:
        eq(c.mc_store(b"set", k, b"front"), b"STORED\r\n")
        mc_pipeline(c, 2000)
    with env.proxy.client("mc_back") as c:
        eq(c.mc_store(b"set", k, b"back"), b"STORED\r\n")
        eq(c.mc_get(b"get", k), [(k, 0, b"back", None)])
        mc_pipeline(c, 2000, batch=MC_TLS_BATCH)
    with env.tls("rd_front") as c:
        eq(c.rd("SET", k, b"x"), "OK")
        rd_pipeline(c, 2000)
    # the plaintext backend holds what the TLS client wrote
    with Raw(("127.0.0.1", env.mc_plain.port)) as d:
        eq(d.mc_get(b"get", k), [(k, 0, b"front", None)])


# ---------------------------------------------------------------- certificates refused

@R.test(ringleader=True)
def client_cert_required_and_missing(env):
    with env.tls("mc_auth", cert=env.certs.client) as c:
        eq(c.mc(b"version")[:8], b"VERSION ", "with a client certificate")
    before = env.stats()["mc_auth"]["tls_verify_failures"]
    refused = False
    try:
        with env.tls("mc_auth", timeout=5) as c:
            # TLS 1.3: the client's side of the handshake completes before the proxy sees
            # that no certificate came; the refusal arrives as an alert on the first read.
            c.send(b"version\r\n")
            c.read_line()
    except (ssl.SSLError, EOFError, ConnectionResetError, BrokenPipeError):
        refused = True
    check(refused, "a client without a certificate was served")
    wait_for(lambda: env.stats()["mc_auth"]["tls_verify_failures"] > before,
             "tls_verify_failures counts the refusal")


@R.test(ringleader=True)
def backend_signed_by_another_ca(env):
    with env.proxy.client("mc_wrongca") as c:
        eq(c.mc(b"get x"), b"SERVER_ERROR tls: certificate verify failed\r\n")
        # the server is down now (server_failure_limit 1): on_down error answers
        line = c.mc(b"get y")
        check(line.startswith(b"SERVER_ERROR"), "while down: %r" % line)
    with env.tls("mc_both") as c:      # other pools are untouched
        k = unique(b"ok")
        eq(c.mc_store(b"set", k, b"1"), b"STORED\r\n")
    st = stats_when(env, lambda st: server_stats(st, "mc_wrongca")["tls_verify_failures"] >= 1
                    and server_stats(st, "mc_wrongca")["server_err"] >= 1
                    and server_stats(st, "mc_wrongca")["state"] == "down")
    srv = server_stats(st, "mc_wrongca")
    check(srv["tls_verify_failures"] >= 1, "verify failure counted: %r" % srv)
    check(srv["server_err"] >= 1, "a server failure: %r" % srv)
    eq(srv["state"], "down", "the failing server is down")
    eq(server_stats(st, "mc_both")["state"], "up", "the other pool's server")


@R.test(ringleader=True)
def redis_backend_requires_a_client_cert(env):
    with env.proxy.client("rd_nocert") as c:
        r = c.rd("GET", b"k")
        check("tls:" in str(r) and str(r).startswith("ERR"), "without a client cert: %r" % r)
    srv = server_stats(stats_when(env, lambda st: server_stats(st, "rd_nocert")
                                  ["tls_verify_failures"] >= 1), "rd_nocert")
    check(srv["tls_verify_failures"] >= 1, "counted as a verify failure: %r" % srv)


# ---------------------------------------------------------------- what is not TLS

@R.test(ringleader=True)
def plaintext_to_tls_port(env):
    before = env.stats()["mc_front"]["tls_protocol_errors"]
    timeouts = env.stats()["mc_front"]["tls_handshake_timeouts"]
    with env.proxy.client("mc_front", timeout=3) as c:
        c.send(b"get foo\r\n")
        check(c.closed(timeout=2.0), "the connection stays open")
        eq(bytes(c.buf), b"", "bytes sent back in reply to plaintext")
    # closed for the bad bytes at once, not by the handshake timeout: told by the
    # counters, not by the clock (a loaded sanitizer run is slow)
    wait_for(lambda: env.stats()["mc_front"]["tls_protocol_errors"] > before,
             "tls_protocol_errors counts it")
    eq(env.stats()["mc_front"]["tls_handshake_timeouts"], timeouts, "not a handshake timeout")


@R.test(ringleader=True)
def tls_client_on_plain_pool(env):
    """A TLS ClientHello to a plaintext pool is just bad input there: the handshake fails
    or times out on the client's side, and every other client is served meanwhile."""
    for pool in ("mc_plainpool", "rd_plainpool"):
        out = {}

        def attempt():
            try:
                with env.tls(pool, timeout=2):
                    out["ok"] = True
            except (ssl.SSLError, OSError, EOFError) as e:
                out["err"] = e
        t = threading.Thread(target=attempt, daemon=True)
        t.start()
        k = unique(b"plain")
        for _ in range(5):
            with env.proxy.client(pool, timeout=2) as c:
                if pool.startswith("mc"):
                    eq(c.mc_store(b"set", k, b"1"), b"STORED\r\n", "plain client beside it")
                else:
                    eq(c.rd("SET", k, b"1"), "OK", "plain client beside it")
        t.join(5)
        check(not t.is_alive(), "the TLS client hangs on %s" % pool)
        check("err" in out, "a TLS handshake succeeded on plaintext pool %s" % pool)


@R.test(ringleader=True)
def garbage_after_handshake(env):
    before = env.stats()["mc_front"]["tls_protocol_errors"]
    c = env.tls("mc_front")
    eq(c.mc(b"version")[:8], b"VERSION ")
    os.write(c.sock.fileno(), b"\x17\x03\x03\x00\x20" + b"not a record" * 3)
    check(c.closed(timeout=3.0), "the proxy keeps a connection that sent a forged record")
    c.close()
    wait_for(lambda: env.stats()["mc_front"]["tls_protocol_errors"] > before,
             "the bad record is counted")
    with env.tls("mc_front") as d:
        eq(d.mc(b"version")[:8], b"VERSION ", "the proxy serves on")


@R.test(ringleader=True)
def stalled_handshake_times_out(env):
    before = env.stats()["mc_front"]["tls_handshake_timeouts"]
    s = socket.create_connection(env.proxy.addr("mc_front"), 5)
    s.sendall(b"\x16\x03\x01")          # the start of a record, then nothing
    t0 = time.monotonic()
    s.settimeout(HANDSHAKE_S + patience(3))
    try:
        data = s.recv(100)
    except (socket.timeout, ConnectionResetError):
        data = None
    took = time.monotonic() - t0
    s.close()
    eq(data, b"", "closed without a reply")
    # not before the timeout (strict); after it, a bound against a hang
    check(HANDSHAKE_S - 0.1 <= took < HANDSHAKE_S + patience(2),
          "closed after %.2f s (tls_handshake_timeout %d s, 1-s tick)" % (took, HANDSHAKE_S))
    wait_for(lambda: env.stats()["mc_front"]["tls_handshake_timeouts"] > before,
             "tls_handshake_timeouts counts it")


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@R.test(ringleader=True)
def handshake_churn_leaves_nothing(env):
    pid = env.proxy.proc.pid
    ctx = env.ctx()
    # Warm up every worker: the first handshakes allocate for good, and each worker opens
    # its own connection to the backend on its first forwarded request. Connections held
    # open together land on both workers (SO_REUSEPORT spreads them).
    warm = [env.tls("mc_front") for _ in range(8)]
    for c in warm:
        eq(c.mc_get(b"get", b"warm"), [], "warm-up get")
    for c in warm:
        c.close()
    time.sleep(0.3)
    fds0, rss0 = fd_count(pid), rss_kb(pid)
    for i in range(200):
        raw = socket.create_connection(env.proxy.addr("mc_front"), 5)
        if i % 4 == 3:                  # a quarter leave in the middle of the handshake
            raw.sendall(b"\x16\x03\x01\x00\x05hello")
            raw.close()
            continue
        s = ctx.wrap_socket(raw, server_hostname="localhost")
        if i % 2:
            s.sendall(b"get churn\r\n")
            s.recv(100)
        s.close()
    wait_for(lambda: fd_count(pid) <= fds0, "the proxy's fds back to %d (now %d)" % (
        fds0, fd_count(pid)))
    st = stats_when(env, lambda st: st["mc_front"]["tls_connections"] == 0 and
                    st["mc_front"]["client_connections"] == 0)["mc_front"]
    eq(st["tls_connections"], 0, "TLS connections open after the churn")
    eq(st["client_connections"], 0, "client connections open after the churn")
    rss1 = rss_kb(pid)
    print("  200 handshakes: fds %d -> %d, RSS %d -> %d kB" % (fds0, fd_count(pid), rss0, rss1))
    if not sanitized():
        check(rss1 - rss0 < 8 * 1024, "RSS grew by %d kB over 200 handshakes" % (rss1 - rss0))


# ---------------------------------------------------------------- real clients

@R.test(ringleader=True)
def real_clients(env):
    c = env.certs
    host, port = env.proxy.addr("rd_front")
    if shutil.which("redis-cli"):
        k = unique(b"cli").decode()
        base = ["redis-cli", "--tls", "--cacert", c.ca, "-h", host, "-p", str(port)]
        r = subprocess.run(base + ["SET", k, "from-cli"], capture_output=True, timeout=10)
        eq(r.stdout.strip(), b"OK", "redis-cli --tls SET (%r)" % r.stderr)
        hb, pb = env.proxy.addr("rd_both")
        r = subprocess.run(["redis-cli", "--tls", "--cacert", c.ca, "-h", hb, "-p", str(pb),
                            "PING"], capture_output=True, timeout=10)
        eq(r.stdout.strip(), b"PONG", "redis-cli --tls through TLS on both sides")
    try:
        import redis
    except ImportError:
        redis = None
    if redis is not None:
        r = redis.Redis(host=host, port=port, ssl=True, ssl_ca_certs=c.ca,
                        socket_timeout=5)
        k = unique(b"py")
        check(r.set(k, b"from-redis-py"), "redis-py set")
        eq(r.get(k), b"from-redis-py", "redis-py get")
        eq(r.mget([k, k + b"-none"]), [b"from-redis-py", None], "redis-py mget")
        r.close()
    try:
        from pymemcache.client.base import Client
    except ImportError:
        Client = None
    if Client is not None:
        m = Client(env.proxy.addr("mc_both"), tls_context=env.ctx(), timeout=5)
        k = unique(b"pm").decode()
        check(m.set(k, b"from-pymemcache"), "pymemcache set")
        eq(m.get(k), b"from-pymemcache", "pymemcache get")
        m.close()
    if redis is None and Client is None and not shutil.which("redis-cli"):
        raise Skip("no redis-cli, redis-py or pymemcache installed")


# ---------------------------------------------------------------- rotation

def peer_serial(addr, ctx, session=None):
    with TlsRaw(addr, ctx, session=session) as c:
        der = c.sock.getpeercert(binary_form=True)
    out = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-serial"],
                         input=der, capture_output=True, timeout=10).stdout
    return int(out.strip().split(b"=")[1], 16)


@R.test(ringleader=True)
def rotation_by_sighup(env):
    c = env.certs
    d = os.path.join(tmpdir(), "rot")
    os.makedirs(d, exist_ok=True)
    crt, key = os.path.join(d, "live.crt"), os.path.join(d, "live.key")
    shutil.copy(c.proxy[0], crt)
    shutil.copy(c.proxy[1], key)
    pools = {"rot": {"timeout": 3000, "servers": ["%s:1 a" % env.mc_plain.hostport()],
                     "tls": {"cert": crt, "key": key}}}
    px = Proxy(pools, dump=dump)
    try:
        addr = px.addr("rot")
        ctx = env.ctx()
        eq(peer_serial(addr, ctx), 4001, "the first certificate")
        old = TlsRaw(addr, ctx)
        eq(old.mc(b"version")[:8], b"VERSION ")
        shutil.copy(c.proxy2[0], crt + ".new")
        shutil.copy(c.proxy2[1], key + ".new")
        os.replace(key + ".new", key)
        os.replace(crt + ".new", crt)
        os.kill(px.proc.pid, 1)
        wait_for(lambda: peer_serial(addr, ctx) == 4002, "new connections present serial 4002")
        k = unique(b"rot")
        eq(old.mc_store(b"set", k, b"still"), b"STORED\r\n", "the old connection works on")
        eq(old.mc_get(b"get", k), [(k, 0, b"still", None)])
        # A key that does not match the certificate: the reload fails, the old stays.
        shutil.copy(c.backend[1], key)
        os.kill(px.proc.pid, 1)
        st = wait_for(lambda: (lambda s: s if s["rot"]["last_reload"] not in ("", "ok")
                               else None)(px.stats()), "the bad reload is reported")
        check("does not match" in st["rot"]["last_reload"], "reason: %r" % st["rot"]["last_reload"])
        eq(peer_serial(addr, ctx), 4002, "the running certificate stays after a failed reload")
        eq(old.mc(b"version")[:8], b"VERSION ", "and the old connection too")
        old.close()
        certs = {x["key"]: x for x in st["rot"]["tls_certs"]}
        check(certs["tls.cert"]["not_after"] > time.time() + 20 * 86400,
              "tls_certs shows the expiry: %r" % st["rot"]["tls_certs"])
    finally:
        px.stop()


@R.test(ringleader=True)
def reload_turning_on_tls_closes_plaintext_clients(env):
    c = env.certs
    admin = free_port()
    pools = {"up": {"timeout": 3000, "servers": ["%s:1 a" % env.mc_plain.hostport()]}}
    px = Proxy(pools, dump=dump, glob={"admin": "127.0.0.1:%d" % admin}, verbosity=6)
    addr = px.addr("up")

    def reload_with(tls):
        if tls is None:
            pools["up"].pop("tls", None)
        else:
            pools["up"]["tls"] = tls
        with open(px.conf_path, "w") as f:
            f.write(dump(dict(pools, ringleader={"admin": "127.0.0.1:%d" % admin})))
        status, body = http(admin, "POST", "/reload")
        eq(status, 200, "POST /reload: %s" % body)

    try:
        plain = Raw(addr)
        eq(plain.mc(b"version")[:8], b"VERSION ", "plaintext before the reload")
        auth = {"cert": c.proxy[0], "key": c.proxy[1], "ca": c.ca, "client_auth": True}
        reload_with(auth)
        # a new plaintext client is refused, as it was before this fix
        with Raw(addr, timeout=5) as late:
            late.send(b"version\r\n")
            check(late.closed(5), "a new plaintext client was served")
        # the connected one: its next request is not run and gets no reply
        k = unique(b"revoked")
        plain.send(b"set %s 0 0 1\r\nx\r\n" % k)
        check(plain.closed(5), "the plaintext client was still served after the reload")
        eq(bytes(plain.buf), b"", "bytes sent to the revoked client")
        plain.close()
        st = wait_for(lambda: (lambda s: s if s["up"]["tls_reload_closed"] >= 1 else None)(
            px.stats()), "tls_reload_closed counts it")
        eq(st["up"]["tls_reload_closed"], 1, "tls_reload_closed")
        check(b"closed by the reload: plaintext" in open(px.log_file, "rb").read(),
              "the log says why")
        # a TLS client with a certificate of the CA works, and the set above never ran
        good = TlsRaw(addr, env.ctx(c.client))
        eq(good.mc_get(b"get", k), [], "the revoked client's set was not run")
        eq(good.mc(b"version")[:8], b"VERSION ", "a TLS client with a valid certificate")
        # a reload that changes nothing about client_auth keeps it
        reload_with(dict(auth))
        eq(good.mc(b"version")[:8], b"VERSION ", "kept by a reload with the same ca")
        eq(px.stats()["up"]["tls_reload_closed"], 1, "tls_reload_closed after the same ca")
        # a ca that did not sign its certificate: closed at its next request
        reload_with(dict(auth, ca=c.evil_ca))
        try:
            good.send(b"version\r\n")
            check(good.closed(5), "a TLS client the new ca refuses was still served")
            eq(bytes(good.buf), b"", "bytes sent to the refused TLS client")
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            pass                # closed: the send found it so
        good.close()
        wait_for(lambda: px.stats()["up"]["tls_reload_closed"] == 2,
                 "tls_reload_closed counts the refused certificate")
        check(b"client certificate refused by the new ca" in open(px.log_file, "rb").read(),
              "the log says why")
        eq(px.stop(), 0, "the proxy's exit status (under ASan a leak makes it non-zero)")
    finally:
        px.stop()


@R.test(ringleader=True)
def reload_turning_on_tls_closes_a_blocked_client(env):
    """A plaintext Redis client blocked in BLPOP (its pinned connection waiting), one
    subscribed, one mid-pipeline: each is closed by the reload that turns tls on, at once,
    and the proxy exits cleanly."""
    c = env.certs
    admin = free_port()
    pools = {"rb": {"timeout": 3000, "redis": True,
                    "servers": ["%s:1 a" % env.rd_plain.hostport()]}}
    px = Proxy(pools, dump=dump, glob={"admin": "127.0.0.1:%d" % admin})
    addr = px.addr("rb")
    try:
        blocked = Raw(addr)
        blocked.send(resp_encode("BLPOP", unique("blk").decode(), "0"))
        sub = Raw(addr)
        eq(sub.rd("SUBSCRIBE", "revoked-ch")[0], b"subscribe", "subscribed")
        idle = Raw(addr)
        eq(idle.rd("PING"), "PONG", "PING before the reload")
        wait_for(lambda: px.stats()["rb"]["blocked_clients"] == 1, "the BLPOP is blocked")
        pools["rb"]["tls"] = {"cert": c.proxy[0], "key": c.proxy[1]}
        with open(px.conf_path, "w") as f:
            f.write(dump(dict(pools, ringleader={"admin": "127.0.0.1:%d" % admin})))
        status, body = http(admin, "POST", "/reload")
        eq(status, 200, "POST /reload: %s" % body)
        check(blocked.closed(5), "the blocked client was not closed")
        check(sub.closed(5), "the subscriber was not closed")
        idle.send(resp_encode("PING"))
        check(idle.closed(5), "the idle client was still served")
        for r in (blocked, sub, idle):
            r.close()
        st = wait_for(lambda: (lambda s: s if s["rb"]["tls_reload_closed"] == 3 else None)(
            px.stats()), "tls_reload_closed counts the three")
        eq(st["rb"]["blocked_clients"], 0, "blocked_clients")
        eq(st["rb"]["client_connections"], 0, "client_connections")
        with TlsRaw(addr, env.ctx()) as t:
            eq(t.rd("PING"), "PONG", "a TLS client after the reload")
        eq(px.stop(), 0, "the proxy's exit status (under ASan a leak makes it non-zero)")
    finally:
        px.stop()


@R.test(ringleader=True)
def metrics_show_expiry(env):
    st = env.stats()
    names = {x["key"] for x in st["mc_auth"]["tls_certs"]}
    eq(names, {"tls.cert", "tls.ca"}, "certificate files of mc_auth")
    names = {x["key"] for x in st["rd_both"]["tls_certs"]}
    eq(names, {"tls.cert", "server_tls.cert", "server_tls.ca"}, "certificate files of rd_both")
    eq(st["mc_plainpool"]["tls_certs"], [], "a plaintext pool lists none")


# ---------------------------------------------------------------- ringleader -t

@R.test(ringleader=True)
def test_conf_finds_errors(env):
    c = env.certs
    d = tmpdir()

    def check_conf(tls, want):
        path = os.path.join(d, "t-%d.yml" % free_port())
        with open(path, "w") as f:
            f.write(dump({"p": {"listen": "127.0.0.1:1", "servers": ["127.0.0.1:2:1"],
                                "tls": tls}}))
        r = subprocess.run([binary("ringleader"), "-t", "-c", path], capture_output=True,
                           timeout=20)
        text = (r.stdout + r.stderr).decode()
        eq(r.returncode, 1 if want else 0, "ringleader -t exit status: %s" % text)
        if want:
            check(re.search(re.escape(path) + want, text), "message %r lacks %r" % (text, want))
    check_conf({"cert": c.proxy[0], "key": c.proxy[1]}, None)
    check_conf({"cert": "/nonexistent/proxy.crt", "key": c.proxy[1]},
               r":6:11: key 'tls.cert': cannot read '/nonexistent/proxy.crt': No such file")
    check_conf({"cert": c.proxy[0], "key": c.backend[1]},
               r":7:10: key 'tls.key': the key in '.*' does not match the certificate")
    check_conf({"cert": c.expired[0], "key": c.expired[1]},
               r":6:11: key 'tls.cert': the certificate in '.*' has expired")
    check_conf({"cert": c.proxy[0], "key": c.proxy[1], "client_auth": True},
               r":8:5: key 'tls': client_auth needs ca")


@R.test(ringleader=True)
def clean_exit(env):
    rc = env.proxy.stop()
    eq(rc, 0, "the proxy's exit status (under ASan a leak makes it non-zero)")


if __name__ == "__main__":     # test_cluster_tls.py imports the certificates
    R.main(Env)

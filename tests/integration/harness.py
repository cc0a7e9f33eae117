"""harness.py: real memcached/redis-server backends and the proxy on free 127.0.0.1 ports, for the integration tests.

Every test file is a standalone script (`make check` runs it with /usr/bin/python3):
exit 0 when all its tests pass, 77 when nothing could run, 1 on any failure, and the
last line printed is "N passed, N failed, N skipped".

Environment
  RL_PROXY=ringleader|nutcracker   which proxy to start (default ringleader); tests of
                                   ringleader-only behaviour are skipped under nutcracker
  RL_PROXY_ADDR=host:port          an already-running proxy's memcache pool: nothing is
                                   started, tests that need to see the backends are skipped
  RL_REDIS_PROXY_ADDR=host:port    the same for the redis test files
  top_builddir / top_srcdir        set by `make check`; else build/release under the tree
  RL_TEST_VERBOSE=1                print each test's name and time
  RL_TEST_SLOW=N                   multiply every bound against a hang by N (default 3 for
                                   the sanitizer build, else 1; see patience())

Every process started here is stopped by its PID (SIGTERM, then SIGKILL) in a finally
block and again at exit, whatever happened. Every wait has a timeout.
"""

import atexit
import base64
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request

SKIP = 77
PROXY_KIND = os.environ.get("RL_PROXY", "ringleader")
if PROXY_KIND not in ("ringleader", "nutcracker"):
    sys.stderr.write("RL_PROXY must be ringleader or nutcracker\n")
    sys.exit(1)

HERE = os.path.dirname(os.path.abspath(__file__))
TOP_SRCDIR = os.environ.get("top_srcdir") or os.path.normpath(os.path.join(HERE, "..", ".."))
TOP_BUILDDIR = os.environ.get("top_builddir") or os.path.join(TOP_SRCDIR, "build", "release")
VECTORS = os.path.join(TOP_SRCDIR, "tests", "vectors", "twemproxy")

START_TIMEOUT = 10.0   # seconds for a process to accept connections
IO_TIMEOUT = 10.0      # default seconds for one socket read


class Skip(Exception):
    """Raised by a test (or a fixture) that cannot run here; counted as skipped."""


class StartError(Exception):
    """A process did not come up; carries the tail of its log."""


def binary(name):
    """Path of one of our built programs (ringleader, ringleader-ring), or raise Skip."""
    for d in (TOP_BUILDDIR, os.path.join(TOP_BUILDDIR, "src")):
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise Skip("%s not built in %s" % (name, TOP_BUILDDIR))


_sanitized = []


def sanitized():
    """Whether the ringleader under test is the ASan/UBSan build (slower, and its RSS is
    mostly the sanitizer's own)."""
    if not _sanitized:
        try:
            with open(binary("ringleader"), "rb") as f:
                _sanitized.append(b"__asan_init" in f.read())
        except (OSError, Skip):
            _sanitized.append(False)
    return _sanitized[0]


def slow_factor():
    """How much slower than an idle machine this run may be: RL_TEST_SLOW when set, else 3
    for the sanitizer build (ASan+UBSan on a loaded 2-core machine), else 1."""
    v = os.environ.get("RL_TEST_SLOW")
    if v:
        try:
            return max(1.0, float(v))
        except ValueError:
            pass
    return 3.0 if sanitized() else 1.0


def patience(seconds):
    """A bound against a hang, scaled by slow_factor(). Tests assert on outcomes (bytes,
    counts, order); a wall-clock bound only says the work did not hang, so it must hold on
    the slowest machine the suite runs on."""
    return seconds * slow_factor()


def parse_addr(text):
    host, _, port = text.rpartition(":")
    return (host or "127.0.0.1", int(port))


# ---------------------------------------------------------------- ports and processes

_given_ports = set()


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now and that this process has not
    handed out before. (Another process may still take it before we bind: the starters
    retry with a new port when the server dies at start.)"""
    for _ in range(100):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        finally:
            s.close()
        if port not in _given_ports:
            _given_ports.add(port)
            return port
    raise StartError("no free port found")


def port_is_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


_tmpdir = None


def tmpdir():
    """One temporary directory per test process, removed at exit."""
    global _tmpdir
    if _tmpdir is None:
        _tmpdir = tempfile.mkdtemp(prefix="rl-it-")
    return _tmpdir


_running = []


class Proc:
    """A child process with its output in a log file; stop() ends it by PID."""

    def __init__(self, name, argv, env=None):
        self.name = name
        self.argv = argv
        self.log_path = os.path.join(tmpdir(), "%s-%d.log" % (name, len(_running)))
        self.log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                      stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True)
        self.pid = self.popen.pid
        _running.append(self)

    def alive(self):
        return self.popen.poll() is None

    def stop(self, timeout=5.0):
        """SIGTERM, wait up to timeout, then SIGKILL. Returns the exit status."""
        if self.popen.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(timeout)
            except ProcessLookupError:
                pass
        if self in _running:
            _running.remove(self)
        self.log.close()
        return self.popen.returncode

    def log_tail(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""

    def wait_listening(self, port, timeout=START_TIMEOUT):
        """Wait until 127.0.0.1:port accepts a connection while this process lives."""
        timeout = patience(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise StartError("%s exited with %s before listening on %d:\n%s" % (
                    self.name, self.popen.returncode, port, self.log_tail()))
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                # It answers; make sure it is ours and did not just die on a bind error
                # (a loaded machine may take longer than any fixed pause to let it die).
                time.sleep(0.02)
                ours = listener_is(self.pid, port)
                if ours is False:
                    raise StartError("127.0.0.1:%d is another program's; %s did not get it" % (
                        port, self.name))
                if self.alive():
                    return
            except OSError:
                time.sleep(0.02)
        raise StartError("%s not listening on %d after %.0fs:\n%s" % (
            self.name, port, timeout, self.log_tail()))


def listener_is(pid, port):
    """Whether the sockets listening on 127.0.0.1:port (or the wildcard) are all pid's:
    True, False when one is another process's (a parallel test program took the port
    between free_port() and the bind), None when /proc cannot tell."""
    inodes = set()
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                ip, _, p = fields[1].partition(":")
                if fields[3] == "0A" and int(p, 16) == port and ip in ("0100007F", "00000000"):
                    inodes.add(fields[9])
        if not inodes:
            return None
        fd_dir = "/proc/%d/fd" % pid
        mine = set()
        for fd in os.listdir(fd_dir):
            try:
                link = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                mine.add(link[8:-1])
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    return inodes <= mine


def stop_all():
    for p in list(reversed(_running)):
        try:
            p.stop()
        except Exception:  # keep stopping the others
            pass
    if _tmpdir and not os.environ.get("RL_KEEP_TMP"):
        import shutil
        shutil.rmtree(_tmpdir, ignore_errors=True)


atexit.register(stop_all)


def _on_term(signum, frame):
    raise SystemExit(128 + signum)   # unwinds through finally blocks and atexit


signal.signal(signal.SIGTERM, _on_term)
signal.signal(signal.SIGHUP, _on_term)


def _start_with_retry(start, attempts=3):
    last = None
    for _ in range(attempts):
        try:
            return start(free_port())
        except StartError as e:
            last = e
    raise last


# ---------------------------------------------------------------- raw client

class Raw:
    """A byte-level client: send exact bytes, read until a predicate with a timeout."""

    def __init__(self, addr, timeout=IO_TIMEOUT):
        self.addr = addr
        self.timeout = timeout
        self.sock = socket.create_connection(addr, patience(timeout))   # sendall's bound too
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.eof = False

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no reply from %s:%d within %.1fs; have %r" % (
                self.addr[0], self.addr[1], self.timeout, bytes(self.buf[:200])))
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(1 << 20)
        except socket.timeout:
            raise TimeoutError("no reply from %s:%d within %.1fs; have %r" % (
                self.addr[0], self.addr[1], self.timeout, bytes(self.buf[:200])))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            raise EOFError("connection closed by peer; have %r" % bytes(self.buf[:200]))
        self.buf += chunk

    def read_until(self, pred, timeout=None):
        """pred(buf) returns how many bytes make one complete unit (or None when more are
        needed). Returns those bytes and keeps the rest buffered. The timeout is a bound
        against a hang, scaled by patience()."""
        deadline = time.monotonic() + patience(timeout or self.timeout)
        while True:
            n = pred(self.buf)
            if n is not None:
                out = bytes(self.buf[:n])
                del self.buf[:n]
                return out
            self._fill(deadline)

    def read_exact(self, n, timeout=None):
        return self.read_until(lambda b: n if len(b) >= n else None, timeout)

    def pipeline(self, data, want, timeout=30):
        """Sends data in one write from another thread while reading (so the proxy's
        replies never back up into our unread send) and fails at the first byte of the
        replies that differs from want."""
        t = threading.Thread(target=self.send, args=(data,), daemon=True)
        t.start()
        got = self.read_exact(len(want), timeout=timeout)
        t.join(patience(10))
        if got != want:
            i = next(j for j in range(len(want)) if got[j] != want[j])
            raise AssertionError("pipeline reply differs at byte %d: got %r want %r" % (
                i, got[max(0, i - 60):i + 60], want[max(0, i - 60):i + 60]))

    def read_line(self, timeout=None):
        """One line including its \\r\\n."""
        def pred(b):
            i = b.find(b"\r\n")
            return i + 2 if i >= 0 else None
        return self.read_until(pred, timeout)

    def closed(self, timeout=2.0):
        """True when the peer closes within timeout (scaled by patience()) with nothing more
        to read."""
        deadline = time.monotonic() + patience(timeout)
        try:
            while True:
                self._fill(deadline)
        except EOFError:
            return True
        except TimeoutError:
            return False

    def request(self, data, pred, timeout=None):
        self.send(data)
        return self.read_until(pred, timeout)

    # memcached text protocol ------------------------------------------------
    def mc(self, line, timeout=None):
        """Send one command line (\\r\\n added if missing) and read one reply line."""
        if not line.endswith(b"\r\n"):
            line += b"\r\n"
        self.send(line)
        return self.read_line(timeout)

    def mc_store(self, cmd, key, value, flags=0, exptime=0, cas=None, noreply=False):
        parts = [cmd, key, b"%d" % flags, b"%d" % exptime, b"%d" % len(value)]
        if cas is not None:
            parts.append(b"%d" % cas)
        if noreply:
            parts.append(b"noreply")
        self.send(b" ".join(parts) + b"\r\n" + value + b"\r\n")
        return None if noreply else self.read_line()

    def mc_get(self, cmd, *keys, timeout=None):
        """Send a retrieval command and return its reply as a list of
        (key, flags, value, cas-or-None) in reply order (read through END)."""
        self.send(cmd + b" " + b" ".join(keys) + b"\r\n")
        return self.read_values(timeout)

    def read_values(self, timeout=None):
        raw = self.read_until(mc_values_len, timeout)
        return mc_parse_values(raw)

    def read_meta(self, timeout=None):
        """One meta reply: (header line without \\r\\n, value bytes or None)."""
        line = self.read_line(timeout)
        if line.startswith(b"VA "):
            n = int(line.split()[1])
            data = self.read_exact(n + 2, timeout)
            assert data.endswith(b"\r\n"), data[-10:]
            return line[:-2], data[:-2]
        return line[:-2], None

    # redis RESP ---------------------------------------------------------------
    def rd(self, *args, timeout=None):
        """Send one command (RESP array of bulk strings) and read one reply."""
        self.send(resp_encode(*args))
        return self.read_resp(timeout)

    def read_resp(self, timeout=None):
        out = []

        def pred(b):
            r = resp_parse(b, 0)
            if r is None:
                return None
            out.append(r[0])
            return r[1]
        self.read_until(pred, timeout)
        return out[-1]


def mc_values_len(b):
    """Length of one complete VALUE ... END reply at the start of b, or None."""
    pos = 0
    while True:
        i = b.find(b"\r\n", pos)
        if i < 0:
            return None
        line = bytes(b[pos:i])
        if line == b"END":
            return i + 2
        if not line.startswith(b"VALUE "):
            return i + 2     # an error line ends the reply
        n = int(line.split()[3])
        end = i + 2 + n + 2
        if len(b) < end:
            return None
        pos = end


def mc_parse_values(raw):
    out = []
    pos = 0
    while True:
        i = raw.index(b"\r\n", pos)
        line = raw[pos:i]
        if line == b"END":
            return out
        if not line.startswith(b"VALUE "):
            raise AssertionError("unexpected reply line %r" % line)
        f = line.split()
        n = int(f[3])
        value = raw[i + 2:i + 2 + n]
        assert raw[i + 2 + n:i + 4 + n] == b"\r\n", "value not followed by CRLF"
        out.append((f[1], int(f[2]), value, int(f[4]) if len(f) > 4 else None))
        pos = i + 4 + n


class RespError(Exception):
    """A RESP error reply; str() is its text without the leading '-'."""

    def __eq__(self, other):
        return isinstance(other, RespError) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))

    def __repr__(self):
        return "RespError(%r)" % str(self)


def _b(x):
    if isinstance(x, bytes):
        return x
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    return str(x).encode()


def resp_encode(*args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = _b(a)
        parts.append(b"$%d\r\n" % len(a))
        parts.append(a)
        parts.append(b"\r\n")
    return b"".join(parts)


def resp_parse(b, pos):
    """Parse one RESP2 value at b[pos:]. Returns (value, end) or None if incomplete.
    Simple strings -> str, errors -> RespError, integers -> int, bulk -> bytes,
    null -> None, arrays -> list."""
    i = b.find(b"\r\n", pos)
    if i < 0:
        return None
    t = b[pos:pos + 1]
    line = bytes(b[pos + 1:i])
    if t == b"+":
        return line.decode("latin-1"), i + 2
    if t == b"-":
        return RespError(line.decode("latin-1")), i + 2
    if t == b":":
        return int(line), i + 2
    if t == b"$":
        n = int(line)
        if n < 0:
            return None, i + 2
        if len(b) < i + 2 + n + 2:
            return None
        return bytes(b[i + 2:i + 2 + n]), i + 4 + n
    if t == b"*":
        n = int(line)
        if n < 0:
            return None, i + 2
        items = []
        p = i + 2
        for _ in range(n):
            r = resp_parse(b, p)
            if r is None:
                return None
            items.append(r[0])
            p = r[1]
        return items, p
    raise AssertionError("bad RESP type byte %r in %r" % (t, bytes(b[pos:pos + 80])))


# ---------------------------------------------------------------- backends

class Memcached:
    def __init__(self, port, extra=()):
        self.port = port
        self.addr = ("127.0.0.1", port)
        argv = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "1",
                "-m", "64"] + list(extra)
        if os.geteuid() == 0:
            argv += ["-u", "root"]     # memcached refuses to run as root without -u
        self.proc = Proc("memcached-%d" % port, argv)
        try:
            self.proc.wait_listening(port)
        except StartError:
            self.proc.stop()
            raise

    @classmethod
    def start(cls, port=None, extra=()):
        if port is not None:
            return cls(port, extra)
        return _start_with_retry(lambda p: cls(p, extra))

    def hostport(self):
        return "127.0.0.1:%d" % self.port

    def client(self):
        return Raw(self.addr)

    def get_many(self, keys):
        """{key: value} for the keys this server holds (asked directly, 100 per get)."""
        found = {}
        with self.client() as c:
            for i in range(0, len(keys), 100):
                for k, _f, v, _c in c.mc_get(b"get", *keys[i:i + 100]):
                    found[k] = v
        return found

    def stop(self):
        self.proc.stop()


class Redis:
    def __init__(self, port, password=None, extra=()):
        self.port = port
        self.addr = ("127.0.0.1", port)
        self.password = password
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--dir", tmpdir(),
                "--logfile", ""]
        if password:
            argv += ["--requirepass", password]
        argv += list(extra)
        self.proc = Proc("redis-%d" % port, argv)
        try:
            self.proc.wait_listening(port)
        except StartError:
            self.proc.stop()
            raise

    @classmethod
    def start(cls, port=None, password=None, extra=()):
        """extra: more redis-server arguments (e.g. --user NAME RULES...)."""
        if port is not None:
            return cls(port, password, extra)
        return _start_with_retry(lambda p: cls(p, password, extra))

    def hostport(self):
        return "127.0.0.1:%d" % self.port

    def client(self):
        c = Raw(self.addr)
        if self.password:
            r = c.rd("AUTH", self.password)
            assert r == "OK", r
        return c

    def exists_many(self, keys):
        """The subset of keys present on this server (EXISTS each, pipelined)."""
        keys = list(keys)
        with self.client() as c:
            c.send(b"".join(resp_encode("EXISTS", k) for k in keys))
            return {k for k in keys if c.read_resp() == 1}

    def stop(self):
        self.proc.stop()


def owners(backends, keys):
    """{key: [indices of the backends holding it]} asking every backend directly."""
    keys = [_b(k) for k in keys]
    res = {k: [] for k in keys}
    for i, be in enumerate(backends):
        held = be.get_many(keys) if isinstance(be, Memcached) else be.exists_many(keys)
        for k in held:
            res[k].append(i)
    return res


# ---------------------------------------------------------------- proxy

def yaml_scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    s = str(v)
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def yaml_dump(pools):
    """pools: {name: {key: scalar | [scalars]}} -> twemproxy-style YAML text."""
    out = []
    for name, pool in pools.items():
        out.append("%s:" % name)
        for k, v in pool.items():
            if isinstance(v, (list, tuple)):
                out.append("  %s:" % k)
                out.extend("   - %s" % yaml_scalar(x) for x in v)
            else:
                out.append("  %s: %s" % (k, yaml_scalar(v)))
    return "\n".join(out) + "\n"


def ydump(obj, indent=0):
    """YAML text for nested dicts and lists of scalars (a whole configuration file with
    mapping-valued keys such as `shadow:` or a `ringleader:` block; yaml_dump writes the
    flat twemproxy form); a dict inside a list is written in flow style."""
    pad = " " * indent
    out = []
    for k, v in obj.items():
        if isinstance(v, dict):
            out.append("%s%s:" % (pad, k))
            out.append(ydump(v, indent + 2))
        elif isinstance(v, (list, tuple)):
            out.append("%s%s:" % (pad, k))
            for x in v:
                if isinstance(x, dict):
                    out.append("%s - {%s}" % (pad, ", ".join(
                        "%s: %s" % (a, yaml_scalar(b)) for a, b in x.items())))
                else:
                    out.append("%s - %s" % (pad, yaml_scalar(x)))
        else:
            out.append("%s%s: %s" % (pad, k, yaml_scalar(v)))
    return "\n".join(out)


def wait_stopped(pid, timeout=5.0):
    """Until the kernel shows pid stopped (SIGSTOP is delivered asynchronously)."""
    deadline = time.monotonic() + patience(timeout)
    while time.monotonic() < deadline:
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        time.sleep(0.01)
    raise AssertionError("process %d not stopped after %.0f s" % (pid, timeout))


def ring_owners(conf, pool, keys, timeout=60):
    """{key: owner label} for keys (bytes) from `ringleader-ring --tsv` on a config file:
    the placement the proxy must follow. Every key must be answered."""
    r = subprocess.run([binary("ringleader-ring"), "-c", conf, "-p", pool, "--tsv"],
                       input=b"".join(k + b"\n" for k in keys), capture_output=True,
                       timeout=timeout)
    eq(r.returncode, 0, "ringleader-ring --tsv exit (%s)" % r.stderr[-300:])
    out = {}
    for line in r.stdout.splitlines():
        k, _, owner = line.rpartition(b"\t")
        out[k] = owner.decode()
    eq(sorted(out), sorted(keys), "ringleader-ring --tsv answers every key")
    return out


def server_lines(backends, names=None, weights=None):
    lines = []
    for i, be in enumerate(backends):
        s = "%s:%d" % (be.hostport(), weights[i] if weights else 1)
        if names:
            s += " " + names[i]
        lines.append(s)
    return lines


def http(port, method, path, timeout=10):
    """(status, body text) of one request to 127.0.0.1:port (the admin endpoint)."""
    # no body, so no Content-Type (urllib would add a form's): as `curl -X POST` sends it
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=patience(timeout)) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def read_stats(port, timeout=5):
    """The JSON document a stats port on 127.0.0.1 writes before it closes."""
    with Raw(("127.0.0.1", port)) as c:
        try:
            while True:
                c._fill(time.monotonic() + patience(timeout))
        except EOFError:
            pass
        return json.loads(bytes(c.buf))


NAMES = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


class Proxy:
    """The proxy under test (RL_PROXY) started on a generated YAML, or an external one.

    pools: {name: {...pool keys...}}; a pool's `listen` is filled in with a free port
    when absent. addr(pool) is where that pool listens."""

    def __init__(self, pools, kind=PROXY_KIND, workers=2, verbosity=5, glob=None, dump=None):
        """glob: the top-level `ringleader:` section (not a pool: it gets no listen);
        dump: the YAML writer (default yaml_dump; mapping-form servers need their own)."""
        self.kind = kind
        self.pools = pools
        self.glob = dict(glob or {})
        self.dump = dump or yaml_dump
        self.proc = None
        last = None
        for _ in range(3):
            try:
                self._start(workers, verbosity)
                return
            except StartError as e:
                last = e
                for p in self.pools.values():
                    p.pop("listen", None)
        raise last

    def _start(self, workers, verbosity):
        d = tmpdir()
        for p in self.pools.values():
            p.setdefault("listen", "127.0.0.1:%d" % free_port())
        self.stats_port = free_port()
        n = len(os.listdir(d))
        self.conf_path = os.path.join(d, "proxy-%d.yml" % n)
        doc = dict(self.pools)
        if self.glob:
            doc["ringleader"] = self.glob
        with open(self.conf_path, "w") as f:
            f.write(self.dump(doc))
        pid = os.path.join(d, "proxy-%d.pid" % n)
        log = os.path.join(d, "proxy-%d.out" % n)
        if self.kind == "nutcracker":
            argv = ["nutcracker", "-c", self.conf_path, "-s", str(self.stats_port),
                    "-a", "127.0.0.1", "-i", "1000", "-p", pid, "-o", log,
                    "-v", str(verbosity)]
        else:
            argv = [binary("ringleader"), "-c", self.conf_path, "-s", str(self.stats_port),
                    "-a", "127.0.0.1", "-p", pid, "-o", log, "-v", str(verbosity),
                    "--workers", str(workers)]
        self.log_file = log
        self.proc = Proc(self.kind, argv)
        try:
            for p in self.pools.values():
                self.proc.wait_listening(parse_addr(p["listen"])[1])
            self.proc.wait_listening(self.stats_port)
        except StartError as e:
            self.proc.stop()
            raise StartError("%s\n--- %s log:\n%s" % (e, self.kind, self.log_tail()))

    def addr(self, pool=None):
        if pool is None:
            pool = next(iter(self.pools))
        return parse_addr(self.pools[pool]["listen"])

    def client(self, pool=None, timeout=IO_TIMEOUT):
        return Raw(self.addr(pool), timeout)

    def log_tail(self, n=30):
        try:
            with open(self.log_file, "rb") as f:
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
        except (OSError, AttributeError):
            return self.proc.log_tail(n) if self.proc else ""

    def stats(self):
        """The stats port's JSON document."""
        return read_stats(self.stats_port)

    def stop(self):
        if self.proc:
            return self.proc.stop()
        return None


class PoolEnv:
    """One test file's setup: backends it starts itself and a proxy in front of them, one
    proxy per distinct pool (cached), or the running proxy an environment variable names.

    A subclass sets POOL (the pool's name), BASE (pool keys of every proxy it starts),
    EXTERNAL (the variable naming a running proxy of its protocol), OTHER and OTHER_WHY
    (the other protocol's variable, which makes the file skip) and start_backends()."""
    POOL = None
    BASE = {}
    EXTERNAL = None
    OTHER = None
    OTHER_WHY = ""

    def __init__(self):
        self.external = False
        self.backends = []
        self.more_backends = []      # started later by a test; stopped with the rest
        self.proxies = {}
        ext = os.environ.get(self.EXTERNAL)
        if ext:
            self.external = True
            self.proxy = ExternalProxy(ext)
            return
        if os.environ.get(self.OTHER):
            raise Skip(self.OTHER_WHY)
        self.backends = self.start_backends()
        self.proxy = self.with_pool()

    def start_backends(self):
        raise NotImplementedError

    def pool(self, backends=None, **extra):
        backends = backends or self.backends
        p = {"hash": "md5", "distribution": "ketama", "timeout": 2000, **self.BASE,
             "auto_eject_hosts": False, "servers": server_lines(backends, NAMES[:len(backends)])}
        p.update(extra)
        return p

    def with_pool(self, backends=None, **extra):
        """A proxy on backends (default: the file's) with extra pool keys."""
        backends = backends or self.backends
        key = (tuple(b.port for b in backends), tuple(sorted(extra.items())))
        if key not in self.proxies:
            self.proxies[key] = Proxy({self.POOL: self.pool(backends, **extra)})
        return self.proxies[key]

    def client(self, **extra):
        return (self.with_pool(**extra) if extra else self.proxy).client()

    def diagnostics(self):
        return "--- proxy log tail:\n" + self.proxy.log_tail()

    def close(self):
        for p in self.proxies.values():
            p.stop()
        for b in self.backends + self.more_backends:
            b.stop()


class RedisPoolEnv(PoolEnv):
    """The setup of a Redis test file: 4 redis-servers behind pool "rd"."""
    POOL = "rd"
    BASE = {"redis": True}
    EXTERNAL = "RL_REDIS_PROXY_ADDR"
    OTHER = "RL_PROXY_ADDR"
    OTHER_WHY = "RL_PROXY_ADDR names a running memcache proxy; set RL_REDIS_PROXY_ADDR"

    def start_backends(self):
        return [Redis.start() for _ in range(4)]


class ProxyEnv:
    """A test file's setup of one proxy (self.proxy) in front of backends it started
    (self.backends): the Runner's diagnostics() and close()."""
    proxy = None
    backends = ()

    def diagnostics(self):
        return "--- proxy log tail:\n" + (self.proxy.log_tail() if self.proxy else "")

    def close(self):
        if self.proxy:
            self.proxy.stop()
        for b in self.backends:
            b.stop()


class ExternalProxy:
    """An already-running proxy named by RL_PROXY_ADDR / RL_REDIS_PROXY_ADDR."""

    def __init__(self, addr):
        self.kind = "external"
        self._addr = parse_addr(addr)

    def addr(self, pool=None):
        return self._addr

    def client(self, pool=None, timeout=IO_TIMEOUT):
        return Raw(self._addr, timeout)

    def log_tail(self, n=30):
        return ""

    def stop(self):
        return None


# ---------------------------------------------------------------- twemproxy vectors

def vector_files(include_allhash=False):
    names = sorted(f[:-4] for f in os.listdir(VECTORS) if f.endswith(".yml"))
    out = [os.path.join(VECTORS, n) for n in names]
    if include_allhash:
        d = os.path.join(VECTORS, "allhash")
        out += [os.path.join(d, f[:-4]) for f in sorted(os.listdir(d)) if f.endswith(".yml")]
    return out


def vector_rows(base):
    """[(key bytes, label str)] from base.tsv.gz, in file order."""
    rows = []
    with gzip.open(base + ".tsv.gz", "rb") as f:
        for line in f:
            k, _, label = line.rstrip(b"\n").rpartition(b"\t")
            rows.append((k, label.decode()))
    return rows


def vector_pool(base):
    """(pool name, {pool keys}, [server (hostport, weight, name-or-None)]) from base.yml,
    which is a flat twemproxy file with one pool."""
    name = None
    pool = {}
    servers = []
    with open(base + ".yml") as f:
        for line in f:
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            if not line.startswith(" "):
                name = s.rstrip(":")
            elif s.startswith("- "):
                spec = s[2:].split()
                host, port, weight = spec[0].rsplit(":", 2)
                servers.append(("%s:%s" % (host, port), int(weight),
                                spec[1] if len(spec) > 1 else None))
            else:
                k, _, v = s.partition(":")
                v = v.strip()
                if v.startswith('"') and v.endswith('"'):
                    v = v[1:-1]
                if v in ("true", "false"):
                    v = v == "true"
                elif v.isdigit():
                    v = int(v)
                if k != "servers":
                    pool[k] = v
    return name, pool, servers


# ---------------------------------------------------------------- the runner

class Runner:
    """A tiny deterministic runner: tests run in the order they were declared.

    @runner.test                     runs everywhere
    @runner.test(ringleader=True)    ringleader-only behaviour: skipped under nutcracker
    @runner.test(external=True)      also runs against RL_PROXY_ADDR (talks only to the proxy)
    """

    def __init__(self, name, per_test_timeout=45, total_timeout=240):
        self.name = name
        self.tests = []
        self.per_test_timeout = per_test_timeout
        self.total_timeout = total_timeout
        self.verbose = bool(os.environ.get("RL_TEST_VERBOSE"))

    def test(self, fn=None, ringleader=False, external=False, nutcracker_reason=None,
             timeout=None):
        """timeout: this test's own budget in seconds instead of per_test_timeout (a test
        that moves a lot of bytes); scaled by patience() like the rest."""
        def deco(f):
            self.tests.append((f, ringleader, external, nutcracker_reason))
            if timeout:
                f.rl_timeout = timeout
            return f
        return deco(fn) if fn is not None else deco

    def run(self, setup, argv=None):
        """setup() returns the environment object passed to every test (or raises Skip).
        Exits the process with 0, 1 or 77."""
        argv = sys.argv[1:] if argv is None else argv
        passed = failed = skipped = 0
        # Both budgets are bounds against a hang, not speed targets: scaled by patience().
        total_timeout = int(patience(self.total_timeout))
        budget = [0]

        def on_alarm(signum, frame):
            raise TimeoutError("test took longer than %ds" % budget[0])
        signal.signal(signal.SIGALRM, on_alarm)
        env = None
        try:
            try:
                env = setup()
            except (StartError, OSError) as e:
                print("FAIL %s: setup: %s" % (self.name, e))
                print("0 passed, %d failed, 0 skipped" % len(self.tests))
                sys.stdout.flush()
                return 1
            except Skip as e:
                print("SKIP %s: %s" % (self.name, e))
                print("0 passed, 0 failed, %d skipped" % len(self.tests))
                sys.stdout.flush()
                return SKIP
            # the budget is the tests' (setup is bounded by its own waits, and may queue
            # for a resource another program holds)
            deadline = time.monotonic() + total_timeout
            for f, rl_only, ext_ok, why in self.tests:
                tname = f.__name__
                if argv and not any(a in tname for a in argv):
                    continue
                if rl_only and PROXY_KIND == "nutcracker" and not getattr(env, "external", False):
                    skipped += 1
                    print("skip %s (ringleader-only%s)" % (tname, ": " + why if why else ""))
                    continue
                if getattr(env, "external", False) and not ext_ok:
                    skipped += 1
                    print("skip %s (needs the harness's own backends)" % tname)
                    continue
                if time.monotonic() > deadline:
                    failed += 1
                    print("FAIL %s: file time budget of %ds spent" % (tname, total_timeout))
                    continue
                t0 = time.monotonic()
                budget[0] = int(patience(getattr(f, "rl_timeout", self.per_test_timeout)))
                signal.alarm(budget[0])
                try:
                    f(env)
                    passed += 1
                    if self.verbose:
                        print("ok   %s (%.2fs)" % (tname, time.monotonic() - t0))
                except Skip as e:
                    skipped += 1
                    print("skip %s (%s)" % (tname, e))
                except BaseException as e:   # noqa: B036 - a test must never stop the run
                    if isinstance(e, (KeyboardInterrupt, SystemExit)):
                        raise
                    failed += 1
                    print("FAIL %s (%.2fs)" % (tname, time.monotonic() - t0))
                    traceback.print_exc(file=sys.stdout)
                    if env is not None and hasattr(env, "diagnostics"):
                        print(env.diagnostics())
                finally:
                    signal.alarm(0)
                sys.stdout.flush()
        finally:
            if env is not None and hasattr(env, "close"):
                env.close()
            stop_all()
        print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
        sys.stdout.flush()
        if failed:
            return 1
        return 0 if passed else SKIP

    def main(self, setup):
        sys.exit(self.run(setup))


def check(cond, msg="check failed", *args):
    if not cond:
        raise AssertionError(msg % args if args else msg)


def eq(got, want, what=""):
    if got != want:
        if isinstance(got, list) and isinstance(want, list):
            for i, (a, b) in enumerate(zip(got, want)):
                if a != b:
                    raise AssertionError("%sitem %d of %d/%d: %r != %r" % (
                        what + ": " if what else "", i, len(got), len(want),
                        repr(a)[:300], repr(b)[:300]))
        g, w = repr(got), repr(want)
        raise AssertionError("%s%s != %s" % (what + ": " if what else "",
                                             g[:300], w[:300]))


def b64(key):
    return base64.b64encode(_b(key))


_seq = [0]


def unique(prefix="k"):
    """A key prefix no earlier test in this process used."""
    _seq[0] += 1
    return ("%s%d-%d" % (prefix, os.getpid(), _seq[0])).encode()

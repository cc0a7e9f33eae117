"""Wire clients: Raw (exact bytes, reads bounded by a deadline), the memcached and RESP
encoders and parsers, and the admin/stats HTTP and JSON readers."""

import json
import socket
import threading
import time
import urllib.error
import urllib.request

from .common import IO_TIMEOUT, patience


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


def resp3_end(b, pos):
    """The end of the one RESP2/RESP3 value at b[pos:], or None when it is incomplete."""
    pending = 1
    while pending:
        i = b.find(b"\r\n", pos)
        if i < 0:
            return None
        t = b[pos:pos + 1]
        line = bytes(b[pos + 1:i])
        pos = i + 2
        if t in (b"$", b"!", b"="):
            n = int(line)
            if n >= 0:
                if len(b) < pos + n + 2:
                    return None
                pos += n + 2
        elif t in (b"*", b"~", b">"):
            pending += max(int(line), 0)
        elif t in (b"%", b"|"):
            pending += 2 * int(line)
            if t == b"|":
                continue            # annotates the next value
        elif t not in (b"+", b"-", b":", b"_", b"#", b",", b"("):
            raise AssertionError("bad RESP type %r in %r" % (t, bytes(b[pos - 1:pos + 60])))
        pending -= 1
    return pos


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

"""mock_backend.py: a scriptable memcached/Redis backend on a free 127.0.0.1 port that misbehaves on cue, for the fault tests.

It speaks just enough of the memcached text protocol (or, with protocol="redis", RESP2)
to be a backend of the proxy: an in-memory store behind get/gets/gat/gats, the storage
commands, delete/incr/decr/touch/version; and GET/SET/DEL/EXISTS/MGET/MSET/PING/ECHO/
SELECT/AUTH/INCR for Redis. What it does with each request is scripted:

    mock = MockBackend.start()                 # or MockBackend.start(protocol="redis")
    mock.on_key(b"k1", garbage(b"HELLO\\r\\n"))   # every request naming k1 (times=None)
    mock.on_key(b"k2", delay(800), times=1)     # only the next one
    mock.on_next(close())                       # the next request, whatever its key
    mock.default = silent()                     # everything else
    ...
    mock.received_keys()  mock.requests()  mock.connections()  mock.stop()

Actions (the reply that would have been sent is called "the normal reply"):
    normal()          answer normally
    garbage(data)     send data instead of the reply (the connection stays open)
    half_stall(cut)   send the first `cut` bytes of the normal reply (default: half), then
                      never answer on that connection again (requests are still recorded)
    half_close(cut)   send the first `cut` bytes, then close the connection
    delay(ms)         wait ms, then answer normally (requests behind it on the same
                      connection wait too, as behind a real slow server)
    close()           close the connection on receipt, answering nothing
    silent()          never answer on that connection again (accept, read, record)

A rule applies to a request when one of the request's keys is the rule's key; a multi-key
request hit by a rule gets the action for the whole reply. on_next() rules apply to the
next requests in arrival order, before key rules. Internal requests of the proxy (Redis
SELECT/AUTH, memcached version probes) get the same treatment as any other.

Bounded: every socket has a timeout, each connection has its own thread, and stop() (or
the end of a `with` block) ends every thread within about a second. stdlib only.
"""

import socket
import sys
import threading
import time

POLL = 0.05              # seconds between checks of the stop flag
MC_STORAGE = {b"set", b"add", b"replace", b"append", b"prepend", b"cas"}
MC_RETRIEVAL = {b"get", b"gets", b"gat", b"gats"}


class Action:
    def __init__(self, kind, data=None, cut=None, ms=0):
        self.kind = kind
        self.data = data
        self.cut = cut
        self.ms = ms

    def __repr__(self):
        return "Action(%s)" % self.kind


def normal():
    return Action("normal")


def garbage(data):
    return Action("garbage", data=data)


def half_stall(cut=None):
    return Action("half_stall", cut=cut)


def half_close(cut=None):
    return Action("half_close", cut=cut)


def delay(ms):
    return Action("delay", ms=ms)


def close():
    return Action("close")


def silent():
    return Action("silent")


class Request:
    """One request as the mock saw it."""

    def __init__(self, conn, args, keys, raw):
        self.t = time.monotonic()
        self.conn = conn          # connection number (1, 2, ... in accept order)
        self.args = args          # [command, arg, ...] as bytes (RESP: every argument)
        self.keys = keys          # the keys it names
        self.raw = raw            # the bytes as received
        self.action = None        # the Action applied

    @property
    def cmd(self):
        return self.args[0].lower() if self.args else b""

    def __repr__(self):
        return "Request(conn=%d, %r, %s)" % (self.conn, self.args[:4], self.action)


class _Rule:
    def __init__(self, action, times):
        self.action = action
        self.left = times         # None: forever


class MockBackend:
    def __init__(self, port=None, protocol="memcache"):
        if protocol not in ("memcache", "redis"):
            raise ValueError("protocol must be memcache or redis")
        self.protocol = protocol
        self.lock = threading.Lock()
        self.store = {}           # key -> (flags, value)
        self.default = normal()
        self._key_rules = {}
        self._next_rules = []
        self._requests = []
        self._events = []         # (t, conn, "open" | "eof" | "closed")
        self._nconn = 0
        self._stop = threading.Event()
        self._threads = []
        self._socks = set()
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", port or 0))
        self.lsock.listen(64)
        self.lsock.settimeout(POLL)
        self.port = self.lsock.getsockname()[1]
        self.addr = ("127.0.0.1", self.port)
        t = threading.Thread(target=self._accept_loop, name="mock-accept-%d" % self.port,
                             daemon=True)
        self._threads.append(t)
        t.start()

    @classmethod
    def start(cls, port=None, protocol="memcache"):
        return cls(port, protocol)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def hostport(self):
        return "127.0.0.1:%d" % self.port

    # ------------------------------------------------------------ scripting

    def on_key(self, key, action, times=None):
        """Apply action to requests naming key (the next `times` of them, or all)."""
        with self.lock:
            self._key_rules[_b(key)] = _Rule(action, times)

    def on_next(self, action, times=1):
        """Apply action to the next `times` requests, whatever they name."""
        with self.lock:
            self._next_rules.append(_Rule(action, times))

    def reset(self, clear_store=False):
        """Forget every rule and every record (and the store if asked)."""
        with self.lock:
            self._key_rules.clear()
            self._next_rules.clear()
            self._requests.clear()
            self._events.clear()
            self.default = normal()
            if clear_store:
                self.store.clear()

    def _choose(self, keys):
        with self.lock:
            while self._next_rules:
                r = self._next_rules[0]
                if r.left is not None and r.left <= 0:
                    self._next_rules.pop(0)
                    continue
                if r.left is not None:
                    r.left -= 1
                return r.action
            for k in keys:
                r = self._key_rules.get(k)
                if r is None or (r.left is not None and r.left <= 0):
                    continue
                if r.left is not None:
                    r.left -= 1
                return r.action
            return self.default

    # ------------------------------------------------------------ reports

    def requests(self):
        with self.lock:
            return list(self._requests)

    def received_keys(self):
        """Every key named by a request so far, in arrival order (repeats kept)."""
        return [k for r in self.requests() for k in r.keys]

    def connections(self):
        """How many connections were accepted so far."""
        with self.lock:
            return self._nconn

    def events(self):
        with self.lock:
            return list(self._events)

    def closed_by_peer(self, conn):
        """True when the proxy closed connection number conn."""
        return any(c == conn and e == "eof" for _t, c, e in self.events())

    def wait_for(self, pred, timeout=3.0):
        """Poll pred() until true or timeout (a bound against a hang, scaled by the
        harness's patience() when it is loaded); returns its last value."""
        patience = getattr(sys.modules.get("harness"), "patience", None)
        deadline = time.monotonic() + (patience(timeout) if patience else timeout)
        while True:
            v = pred()
            if v or time.monotonic() >= deadline:
                return v
            time.sleep(0.01)

    # ------------------------------------------------------------ lifecycle

    def stop(self):
        """Close the listener and every connection; join every thread (bounded)."""
        self._stop.set()
        try:
            self.lsock.close()
        except OSError:
            pass
        with self.lock:
            socks = list(self._socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in list(self._threads):
            if t is not threading.current_thread():
                t.join(2.0)

    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                s, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self._nconn += 1
                n = self._nconn
                self._socks.add(s)
                self._events.append((time.monotonic(), n, "open"))
            s.settimeout(POLL)
            t = threading.Thread(target=self._serve, args=(s, n),
                                 name="mock-conn-%d-%d" % (self.port, n), daemon=True)
            self._threads.append(t)
            t.start()

    def _event(self, n, what):
        with self.lock:
            self._events.append((time.monotonic(), n, what))

    def _serve(self, s, n):
        buf = bytearray()
        mute = False              # stalled or silent: read and record, answer nothing
        try:
            while not self._stop.is_set():
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    self._event(n, "eof")
                    return
                buf += chunk
                while True:
                    parsed = (self._parse_mc if self.protocol == "memcache"
                              else self._parse_resp)(buf)
                    if parsed is None:
                        break
                    used, args, keys = parsed
                    req = Request(n, args, keys, bytes(buf[:used]))
                    del buf[:used]
                    act = self._choose(keys)
                    req.action = act
                    with self.lock:
                        self._requests.append(req)
                    if mute:
                        continue
                    if act.kind == "close":
                        self._event(n, "closed")
                        return
                    if act.kind == "silent":
                        mute = True
                        continue
                    if act.kind == "garbage":
                        s.sendall(act.data)
                        continue
                    if act.kind == "delay" and self._stop.wait(act.ms / 1000.0):
                        return
                    reply = self._reply(args)
                    if act.kind in ("half_stall", "half_close"):
                        cut = len(reply) // 2 if act.cut is None else act.cut
                        s.sendall(reply[:cut])
                        if act.kind == "half_close":
                            self._event(n, "closed")
                            return
                        mute = True
                        continue
                    if reply:
                        s.sendall(reply)
        except OSError:
            self._event(n, "eof")
        finally:
            with self.lock:
                self._socks.discard(s)
            try:
                s.close()
            except OSError:
                pass

    # ------------------------------------------------------------ memcached text

    @staticmethod
    def _parse_mc(buf):
        """(bytes used, args, keys) for one complete request at the start of buf, or None."""
        i = buf.find(b"\r\n")
        if i < 0:
            return None
        args = bytes(buf[:i]).split()
        used = i + 2
        cmd = args[0].lower() if args else b""
        keys = []
        if cmd in MC_STORAGE and len(args) >= 5:
            try:
                n = int(args[4])
            except ValueError:
                n = -1
            if n >= 0:
                if len(buf) < used + n + 2:
                    return None
                args.append(bytes(buf[used:used + n]))
                used += n + 2
            keys = [args[1]]
        elif cmd in (b"get", b"gets"):
            keys = args[1:]
        elif cmd in (b"gat", b"gats"):
            keys = args[2:]
        elif cmd in (b"delete", b"incr", b"decr", b"touch") and len(args) > 1:
            keys = [args[1]]
        return used, args, keys

    def _mc_reply(self, args):
        if not args:
            return b"ERROR\r\n"
        cmd = args[0].lower()
        st = self.store
        with self.lock:
            if cmd in MC_RETRIEVAL:
                keys = args[1:] if cmd in (b"get", b"gets") else args[2:]
                out = []
                for k in keys:
                    if k in st:
                        flags, v = st[k]
                        cas = b" %d" % (hash(v) & 0xffff) if cmd in (b"gets", b"gats") else b""
                        out.append(b"VALUE %s %d %d%s\r\n%s\r\n" % (k, flags, len(v), cas, v))
                out.append(b"END\r\n")
                return b"".join(out)
            noreply = args[-2] == b"noreply" if cmd in MC_STORAGE else args[-1] == b"noreply"
            if cmd in MC_STORAGE:
                k, flags, v = args[1], int(args[2]), args[-1]
                if cmd == b"add" and k in st:
                    r = b"NOT_STORED\r\n"
                elif cmd in (b"replace", b"append", b"prepend", b"cas") and k not in st:
                    r = b"NOT_FOUND\r\n" if cmd == b"cas" else b"NOT_STORED\r\n"
                else:
                    if cmd == b"append":
                        v = st[k][1] + v
                    elif cmd == b"prepend":
                        v = v + st[k][1]
                    if cmd in (b"append", b"prepend"):
                        flags = st[k][0]
                    st[k] = (flags, v)
                    r = b"STORED\r\n"
            elif cmd == b"delete":
                r = b"DELETED\r\n" if st.pop(args[1], None) is not None else b"NOT_FOUND\r\n"
            elif cmd in (b"incr", b"decr"):
                if args[1] not in st:
                    r = b"NOT_FOUND\r\n"
                else:
                    flags, v = st[args[1]]
                    x = int(v) + (int(args[2]) if cmd == b"incr" else -int(args[2]))
                    x = max(x, 0)
                    st[args[1]] = (flags, b"%d" % x)
                    r = b"%d\r\n" % x
            elif cmd == b"touch":
                r = b"TOUCHED\r\n" if args[1] in st else b"NOT_FOUND\r\n"
            elif cmd == b"version":
                return b"VERSION 1.6.0-mock\r\n"
            elif cmd == b"flush_all":
                st.clear()
                r = b"OK\r\n"
            else:
                return b"ERROR\r\n"
            return b"" if noreply else r

    # ------------------------------------------------------------ RESP

    @staticmethod
    def _parse_resp(buf):
        if not buf:
            return None
        if buf[:1] != b"*":          # inline command
            i = buf.find(b"\r\n")
            if i < 0:
                return None
            args = bytes(buf[:i]).split()
            return i + 2, args, MockBackend._resp_keys(args)
        i = buf.find(b"\r\n")
        if i < 0:
            return None
        try:
            n = int(buf[1:i])
        except ValueError:
            return i + 2, [bytes(buf[:i])], []
        pos = i + 2
        args = []
        for _ in range(max(n, 0)):
            j = buf.find(b"\r\n", pos)
            if j < 0:
                return None
            try:
                ln = int(buf[pos + 1:j])
            except ValueError:
                return j + 2, args, []
            if len(buf) < j + 2 + ln + 2:
                return None
            args.append(bytes(buf[j + 2:j + 2 + ln]))
            pos = j + 2 + ln + 2
        return pos, args, MockBackend._resp_keys(args)

    @staticmethod
    def _resp_keys(args):
        if not args:
            return []
        cmd = args[0].lower()
        if cmd in (b"mget", b"del", b"exists", b"unlink", b"touch"):
            return args[1:]
        if cmd == b"mset":
            return args[1::2]
        if cmd in (b"ping", b"echo", b"select", b"auth", b"quit", b"info", b"command"):
            return []
        return args[1:2]

    def _resp_reply(self, args):
        if not args:
            return b""
        cmd = args[0].lower()
        st = self.store
        with self.lock:
            if cmd == b"ping":
                return b"+PONG\r\n"
            if cmd in (b"select", b"auth"):
                return b"+OK\r\n"
            if cmd == b"echo" and len(args) == 2:
                return _bulk(args[1])
            if cmd == b"get" and len(args) == 2:
                return _bulk(st[args[1]][1]) if args[1] in st else b"$-1\r\n"
            if cmd == b"set" and len(args) >= 3:
                st[args[1]] = (0, args[2])
                return b"+OK\r\n"
            if cmd == b"mget":
                return b"*%d\r\n" % (len(args) - 1) + b"".join(
                    _bulk(st[k][1]) if k in st else b"$-1\r\n" for k in args[1:])
            if cmd == b"mset" and len(args) % 2 == 1:
                for k, v in zip(args[1::2], args[2::2]):
                    st[k] = (0, v)
                return b"+OK\r\n"
            if cmd in (b"del", b"unlink"):
                return b":%d\r\n" % sum(1 for k in args[1:] if st.pop(k, None) is not None)
            if cmd == b"exists":
                return b":%d\r\n" % sum(1 for k in args[1:] if k in st)
            if cmd == b"incr" and len(args) == 2:
                x = int(st.get(args[1], (0, b"0"))[1]) + 1
                st[args[1]] = (0, b"%d" % x)
                return b":%d\r\n" % x
            return b"-ERR unknown command '%s' (mock)\r\n" % args[0]

    def _reply(self, args):
        """The normal reply to one request; a request the mock cannot make sense of
        gets the protocol's generic error rather than ending the connection."""
        try:
            return self._mc_reply(args) if self.protocol == "memcache" else self._resp_reply(args)
        except (ValueError, IndexError, KeyError):
            return b"ERROR\r\n" if self.protocol == "memcache" else b"-ERR mock: bad request\r\n"


def _b(x):
    return x if isinstance(x, bytes) else str(x).encode()


def _bulk(v):
    return b"$%d\r\n%s\r\n" % (len(v), v)

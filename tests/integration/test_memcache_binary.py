"""test_memcache_binary.py: memcached's binary protocol through the proxy, differential against memcached -B binary.

Each test sends the same binary frames to a memcached of its own started with `-B binary`
(the reference) and to the proxy, and compares the reply frames byte for byte: opcode,
status, key, extras, body, opaque, whether the connection closed. CAS values are the
servers' own, so they are compared as "zero or not", and a test that needs one uses the
value each side returned. Pool "one" has one server (byte-exact comparison of whole
sessions); pool "three" has three (routing: each key on its owner, multi-get runs spread
over the servers). docs/protocol-memcache-binary.md is the table these tests hold.
"""

import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Memcached, Proxy, Runner, Skip, check, eq, ring_owners,  # noqa: E402
                     server_lines, unique)
from harness.common import IO_TIMEOUT  # noqa: E402

R = Runner("test_memcache_binary", per_test_timeout=60, total_timeout=240)

GET, SET, ADD, REPLACE, DELETE, INCR, DECR, QUIT, FLUSH, GETQ, NOOP, VERSION = range(12)
GETK, GETKQ, APPEND, PREPEND, STAT, SETQ, ADDQ, REPLACEQ, DELETEQ, INCRQ, DECRQ = range(12, 23)
QUITQ, FLUSHQ, APPENDQ, PREPENDQ = range(23, 27)
TOUCH, GAT, GATQ, SASL_LIST, SASL_AUTH, GATK, GATKQ = 0x1c, 0x1d, 0x1e, 0x20, 0x21, 0x23, 0x24
END_OPAQUE = 0xfeedf00d


def frame(op, key=b"", ext=b"", val=b"", opaque=0, cas=0, magic=0x80, keylen=None,
          extlen=None, bodylen=None):
    """A request frame; keylen/extlen/bodylen override the header's lengths (malformed)."""
    kl = len(key) if keylen is None else keylen
    el = len(ext) if extlen is None else extlen
    bl = len(key) + len(ext) + len(val) if bodylen is None else bodylen
    return struct.pack(">BBHBBHIIQ", magic, op, kl, el, 0, 0, bl, opaque, cas) + ext + key + val


def store_ext(flags=0, exptime=0):
    return struct.pack(">II", flags, exptime)


def arith_ext(delta, initial=0, exptime=0):
    return struct.pack(">QQI", delta, initial, exptime)


def noop_end():
    return frame(NOOP, opaque=END_OPAQUE)


class Bin:
    """A binary protocol connection: send frames, read reply frames."""

    def __init__(self, addr, timeout=IO_TIMEOUT):
        self.s = socket.create_connection(addr, timeout=timeout)
        self.buf = b""
        self.eof = False

    def close(self):
        self.s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.s.sendall(data)

    def _need(self, n):
        while len(self.buf) < n and not self.eof:
            try:
                d = self.s.recv(1 << 16)
            except ConnectionResetError:
                d = b""
            if not d:
                self.eof = True
                break
            self.buf += d
        return len(self.buf) >= n

    def frame(self):
        """The next reply frame as a tuple, or None at the end of the connection."""
        if not self._need(24):
            return None
        magic, op, kl, el, dt, st, bl, opq, cas = struct.unpack(">BBHBBHIIQ", self.buf[:24])
        if not self._need(24 + bl):
            return None
        body = self.buf[24:24 + bl]
        self.buf = self.buf[24 + bl:]
        return (magic, op, kl, el, dt, st, bl, opq, cas, body)

    def until_end(self, opaque=END_OPAQUE):
        """Frames up to the one with opaque (the closing noop's, included), or to the
        connection's end; (frames, closed)."""
        out = []
        while True:
            f = self.frame()
            if f is None:
                return out, True
            out.append(f)
            if f[7] == opaque and f[1] == NOOP:
                return out, False

    def rest(self):
        """Every frame until the connection closes (bounded by the socket timeout)."""
        out = []
        while True:
            f = self.frame()
            if f is None:
                return out
            out.append(f)

    def req(self, data):
        """Send data and a closing noop; the reply frames before that noop's."""
        self.send(data + noop_end())
        out, closed = self.until_end()
        check(not closed, "connection closed before the closing noop's reply: %r" % (out,))
        return out[:-1]


def cas_of(f):
    return f[8]


def norm(frames, version=False):
    """Frames with each CAS as 0 or 'C' (the servers' counters differ) and, with version,
    a VERSION reply's text as 'V'."""
    out = []
    for f in frames:
        f = list(f)
        f[8] = 0 if f[8] == 0 else "C"
        if version and f[1] == VERSION and f[5] == 0:
            f[9] = b"V"
            f[6] = None
        out.append(tuple(f))
    return out


class Env(harness.Env):
    def __init__(self):
        self.need_own_proxy("compares the proxy's backends with a reference server",
                            "ringleader serves the binary protocol; nutcracker closes it")
        self.ref = Memcached.start(extra=["-B", "binary"])
        self.backends = [Memcached.start() for _ in range(3)]
        self.more_backends = [self.ref]
        base = {"hash": "md5", "distribution": "ketama", "timeout": 10000,
                "auto_eject_hosts": False, "allow_flush": True}
        self.one_srv = [self.backends[0]]
        self.proxy = Proxy({
            "one": dict(base, servers=server_lines(self.one_srv, ["a"])),
            "three": dict(base, servers=server_lines(self.backends, ["a", "b", "c"])),
        })

    def direct(self):
        return Bin(self.ref.addr)

    def one(self):
        return Bin(self.proxy.addr("one"))

    def three(self):
        return Bin(self.proxy.addr("three"))


def same(env, make, pool="one", version=False):
    """make(conn) -> frames, run on the reference and through the proxy; equal after norm."""
    with env.direct() as d:
        want = make(d)
    with (env.one() if pool == "one" else env.three()) as p:
        got = make(p)
    eq(norm(got, version), norm(want, version))
    return want, got


def same_bytes(env, data, pool="one"):
    """data sent to both, then every frame until each side closes or answers the closing
    noop: (frames, closed) equal after norm."""
    res = []
    for c in (env.direct(), env.one() if pool == "one" else env.three()):
        with c:
            c.send(data + noop_end())
            frames, closed = c.until_end()
            res.append((norm(frames), closed))
    eq(res[1], res[0])
    return res[0]


# ---------------------------------------------------------------- commands

@R.test
def storage_and_retrieval_match_memcached(env):
    k = unique()

    def run(c):
        return c.req(
            frame(SET, k, store_ext(5, 0), b"hello", opaque=1) +
            frame(GET, k, opaque=2) + frame(GETK, k, opaque=3) +
            frame(GET, k + b"miss", opaque=4) + frame(GETK, k + b"miss", opaque=5) +
            frame(ADD, k, store_ext(), b"x", opaque=6) +
            frame(ADD, k + b"a", store_ext(1, 0), b"new", opaque=7) +
            frame(REPLACE, k + b"miss", store_ext(), b"x", opaque=8) +
            frame(REPLACE, k, store_ext(9, 0), b"v3", opaque=9) +
            frame(APPEND, k, val=b"-app", opaque=10) +
            frame(PREPEND, k, val=b"pre-", opaque=11) +
            frame(APPEND, k + b"miss", val=b"x", opaque=12) +
            frame(PREPEND, k + b"miss", val=b"x", opaque=13) +
            frame(GETK, k, opaque=14) +
            frame(SET, k + b"empty", store_ext(0xffffffff, 0), b"", opaque=15) +
            frame(GET, k + b"empty", opaque=16) +
            frame(DELETE, k + b"a", opaque=17) + frame(DELETE, k + b"a", opaque=18) +
            frame(GET, k + b"a", opaque=19))
    same(env, run)


@R.test
def cas_in_requests_and_replies(env):
    k = unique()

    def run(c):
        out = c.req(frame(SET, k, store_ext(), b"v1", opaque=1) + frame(GET, k, opaque=2))
        cas = cas_of(out[1])
        check(cas != 0 and cas == cas_of(out[0]), "set and get give the item's cas")
        out += c.req(frame(SET, k, store_ext(), b"bad", cas=cas + 1000, opaque=3) +
                     frame(SET, k, store_ext(), b"good", cas=cas, opaque=4) +
                     frame(SET, k + b"miss", store_ext(), b"x", cas=7, opaque=5) +
                     frame(ADD, k, store_ext(), b"x", cas=cas + 1000, opaque=6) +
                     frame(GETK, k, opaque=7))
        cas = cas_of(out[-1])
        out += c.req(frame(APPEND, k, val=b"!", cas=cas + 1000, opaque=8) +
                     frame(APPEND, k, val=b"!", cas=cas, opaque=9) +
                     frame(GET, k, opaque=10))
        cas = cas_of(out[-1])
        out += c.req(frame(DELETE, k, cas=cas + 1000, opaque=11) +
                     frame(DELETE, k, cas=cas, opaque=12) +
                     frame(DELETE, k, cas=cas, opaque=13) + frame(GET, k, opaque=14))
        return out
    same(env, run)


@R.test
def incr_decr_with_initial_and_expiration(env):
    k = unique()

    def run(c):
        out = c.req(frame(INCR, k, arith_ext(5, 10, 0), opaque=1) +   # created: 10
                    frame(INCR, k, arith_ext(5, 10, 0), opaque=2) +   # 15
                    frame(DECR, k, arith_ext(100, 0, 0), opaque=3) +  # floors at 0
                    frame(INCR, k + b"n", arith_ext(1, 3, 0xffffffff), opaque=4) +  # no create
                    frame(DECR, k + b"n", arith_ext(1, 3, 0xffffffff), opaque=5) +
                    frame(INCR, k + b"big", arith_ext(2, 2 ** 64 - 1, 0), opaque=6) +
                    frame(INCR, k + b"big", arith_ext(2, 0, 0), opaque=7) +   # wraps
                    frame(SET, k + b"s", store_ext(), b"abc", opaque=8) +
                    frame(INCR, k + b"s", arith_ext(1, 0, 0), opaque=9) +
                    frame(GET, k, opaque=10))
        cas = cas_of(out[0])
        out += c.req(frame(INCR, k, arith_ext(1, 0, 0), cas=cas + 1000, opaque=11) +
                     frame(INCR, k, arith_ext(1, 0, 0), cas=cas_of(out[2]), opaque=12))
        return out
    same(env, run)


@R.test
def touch_gat_and_gatk(env):
    k = unique()

    def run(c):
        return c.req(frame(SET, k, store_ext(3, 0), b"val", opaque=1) +
                     frame(TOUCH, k, struct.pack(">I", 100), opaque=2) +
                     frame(TOUCH, k + b"miss", struct.pack(">I", 100), opaque=3) +
                     frame(GAT, k, struct.pack(">I", 100), opaque=4) +
                     frame(GATK, k, struct.pack(">I", 0), opaque=5) +
                     frame(GAT, k + b"miss", struct.pack(">I", 1), opaque=6) +
                     frame(GATK, k + b"miss", struct.pack(">I", 1), opaque=7) +
                     frame(GATQ, k + b"miss", struct.pack(">I", 1), opaque=8) +
                     frame(GATKQ, k, struct.pack(">I", 1), opaque=9) +
                     frame(GATKQ, k + b"miss", struct.pack(">I", 1), opaque=10))
    same(env, run)


@R.test
def expiration_is_honoured(env):
    k = unique()

    def run(c):
        out = c.req(frame(SET, k, store_ext(0, 1), b"short", opaque=1) +
                    frame(SET, k + b"l", store_ext(0, 1000), b"long", opaque=2))
        deadline = time.time() + 10
        while time.time() < deadline:      # bounded: memcached's clock ticks each second
            r = c.req(frame(GET, k, opaque=3))
            if r[0][5] == 1:
                break
            time.sleep(0.25)
        return out + r + c.req(frame(GET, k + b"l", opaque=4))
    same(env, run)

    def after_2038(c):
        # an absolute time past INT32_MAX (2046): kept (the text protocol caps it at 2038)
        return c.req(frame(SET, k + b"f", store_ext(0, 0x90000000), b"far", opaque=5) +
                     frame(GET, k + b"f", opaque=6) +
                     frame(TOUCH, k + b"f", struct.pack(">I", 0x90000000), opaque=7) +
                     frame(GAT, k + b"f", struct.pack(">I", 0xfffffffe), opaque=8))
    same(env, after_2038)


@R.test
def quiet_pipelining_answers_in_order(env):
    k = unique()

    def run(c):
        # quiet successes are silent, quiet errors are not; a getq run ended by
        # getk/noop answers its hits only, in order
        return c.req(
            frame(SETQ, k + b"1", store_ext(1, 0), b"one", opaque=1) +
            frame(SETQ, k + b"2", store_ext(2, 0), b"two", opaque=2) +
            frame(ADDQ, k + b"1", store_ext(), b"x", opaque=3) +          # EEXISTS, said
            frame(REPLACEQ, k + b"none", store_ext(), b"x", opaque=4) +   # ENOENT, said
            frame(APPENDQ, k + b"1", val=b"+", opaque=5) +
            frame(PREPENDQ, k + b"none", val=b"+", opaque=6) +            # NOT_STORED
            frame(GETQ, k + b"1", opaque=7) + frame(GETQ, k + b"miss", opaque=8) +
            frame(GETKQ, k + b"2", opaque=9) + frame(GETKQ, k + b"miss", opaque=10) +
            frame(GETK, k + b"miss", opaque=11) +
            frame(INCRQ, k + b"c", arith_ext(1, 5, 0), opaque=12) +
            frame(INCRQ, k + b"c", arith_ext(1, 5, 0), opaque=13) +
            frame(INCRQ, k + b"none", arith_ext(1, 5, 0xffffffff), opaque=14) +  # ENOENT
            frame(DECRQ, k + b"1", arith_ext(1, 5, 0), opaque=15) +       # non-numeric
            frame(GET, k + b"c", opaque=16) +
            frame(DELETEQ, k + b"2", opaque=17) +
            frame(DELETEQ, k + b"2", opaque=18) +                         # ENOENT, said
            frame(GETQ, k + b"2", opaque=19))
    same(env, run)


@R.test
def noop_version_stat_sasl_and_unknown(env):
    def run(c):
        out = c.req(frame(NOOP, opaque=1) + frame(VERSION, opaque=2) +
                    frame(SASL_LIST, opaque=3) +
                    frame(SASL_AUTH, b"PLAIN", val=b"\0user\0pass", opaque=4) +
                    frame(0x50, opaque=6) +
                    frame(0x51, val=b"swallowed body", opaque=7) +
                    frame(STAT, b"nosuchgroup", opaque=8))
        # an unknown opcode with extras: memcached swallows bodylen bytes after them
        out += c.req(frame(0x1b, ext=struct.pack(">I", 1), opaque=5) + b"JUNK")
        # stat: a run of frames with keys, ended by an empty one; the numbers differ
        c.send(frame(STAT, opaque=9))
        frames = []
        while True:
            f = c.frame()
            check(f is not None, "stat's reply ends with an empty frame")
            frames.append(f)
            if f[2] == 0 and f[6] == 0:
                break
        names = {f[9][:f[2]] for f in frames[:-1]}
        check(all(f[1] == STAT and f[5] == 0 and f[7] == 9 for f in frames), "stat frames")
        for n in (b"pid", b"uptime", b"curr_connections", b"version"):
            check(n in names, "stat names %r (got %d names)" % (n, len(names)))
        return out + [frames[-1]]
    same(env, run, version=True)


@R.test
def flush_and_flushq(env):
    k = unique()

    def run(c):
        return c.req(frame(SET, k, store_ext(), b"v", opaque=1) +
                     frame(FLUSHQ, opaque=2) + frame(GET, k, opaque=3) +
                     frame(SET, k, store_ext(), b"v", opaque=4) +
                     frame(FLUSH, ext=struct.pack(">I", 0), opaque=5) +
                     frame(GET, k, opaque=6))
    same(env, run)
    with Bin(env.proxy.addr("three")) as c:     # broadcast to every server
        keys = [k + b"%d" % i for i in range(12)]
        c.req(b"".join(frame(SETQ, x, store_ext(), b"v") for x in keys))
        eq([f[5] for f in c.req(frame(FLUSH, opaque=1))], [0])
        eq(c.req(b"".join(frame(GETKQ, x) for x in keys)), [])


@R.test
def quit_and_quitq_close(env):
    eq(same_bytes(env, frame(SET, unique(), store_ext(), b"v", opaque=1) + frame(QUIT, opaque=2))[1],
       True)
    eq(same_bytes(env, frame(QUITQ, opaque=2)), ([], True))


# ---------------------------------------------------------------- malformed frames

@R.test
def malformed_frames_get_memcacheds_answer(env):
    k = unique()
    cases = [
        ("bad magic", frame(GET, k, magic=0x81)),
        ("key longer than 250", frame(GET, b"k" * 251)),
        ("keylen past bodylen", frame(GET, k, bodylen=1)),
        ("extlen+keylen past bodylen", frame(SET, k, store_ext(), b"", bodylen=len(k) + 2)),
        ("get with extras", frame(GET, k, ext=b"\0\0\0\0")),
        ("get without key", frame(GET)),
        ("set without extras", frame(SET, k, val=b"v")),
        ("set with short extras", frame(SET, k, ext=b"\0\0\0\0", val=b"v")),
        ("incr with short extras", frame(INCR, k, ext=b"\0" * 8)),
        ("delete with a value", frame(DELETE, k, val=b"v")),
        ("version with a key", frame(VERSION, b"x")),
        ("noop with a body", frame(NOOP, val=b"x")),
        ("flush with extras of 3", frame(FLUSH, ext=b"\0\0\0")),
        ("touch without extras", frame(TOUCH, k)),
        ("append with extras", frame(APPEND, k, ext=b"\0" * 8, val=b"v")),
        ("quit with a body", frame(QUIT, val=b"x")),
        ("sasl auth without mechanism", frame(SASL_AUTH, val=b"x")),
    ]
    for name, data in cases:
        res = []
        for c in (env.direct(), env.one()):
            with c:
                # an answered request first (memcached drops replies it has not sent yet
                # when it closes on a bad magic; the proxy sends them: see the docs)
                eq([f[5] for f in c.req(frame(SET, k, store_ext(), b"v", opaque=1))], [0])
                c.send(data + noop_end())
                try:
                    frames, closed = c.until_end()
                except socket.timeout:
                    raise AssertionError("%s: no answer from %s" % (name, "memcached" if not res else "the proxy"))
                res.append((norm(frames), closed))
        eq(res[1], res[0], name)
        check(res[0][1], "%s: memcached closes the connection" % name)
    # A body over 1 GiB: later memcached 1.6 releases (the reference here, 1.6.18, is
    # older) refuse it with EINVAL and close rather than swallow a gigabyte.
    with env.one() as c:
        c.send(frame(0x50, bodylen=1024 * 1024 * 1024 + 1))
        eq([(f[5], f[9]) for f in c.rest()], [(4, b"Invalid arguments")])


@R.test
def touch_and_stat_leave_extra_body_bytes_as_the_next_frame(env):
    """memcached consumes only header, extras and key of touch and stat; what their
    bodylen announces beyond is read as the next frame (here: a whole noop)."""
    k = unique()
    nested = frame(NOOP, opaque=77)
    data = (frame(SET, k, store_ext(), b"v", opaque=1) +
            frame(TOUCH, k, struct.pack(">I", 10), opaque=2, bodylen=len(k) + 4 + len(nested)) +
            nested)
    same_bytes(env, data)


@R.test
def binary_keys_and_partial_frames(env):
    k = unique()
    odd = [k + b" with space", k + b"\r\nnl", k + b"\x00\x01\xff", b"\x80" + k,
           k + b"\x01\t\x7f\xff", k + "clé".encode(), k + b"\xc3\xa9" * 110,
           k + b" " * 150]

    def run(c):
        data = b"".join(frame(SET, x, store_ext(i, 0), b"v%d" % i, opaque=i)
                        for i, x in enumerate(odd))
        data += b"".join(frame(GETK, x, opaque=10 + i) for i, x in enumerate(odd))
        # byte by byte: the frames cut anywhere
        data += noop_end()
        for i in range(len(data)):
            c.send(data[i:i + 1])
        out, closed = c.until_end()
        check(not closed, "answered")
        return out[:-1]
    same(env, run)
    # the text protocol reaches the same items (meta b: base64 keys)
    with harness.Raw(env.proxy.addr("one")) as t:
        import base64
        t.send(b"mg " + base64.b64encode(odd[2]) + b" b v\r\n")
        eq(t.read_meta(), (b"VA 2", b"v2"))


@R.test
def partial_frame_does_not_stall_other_clients(env):
    k = unique()
    with env.one() as slow, env.one() as fast:
        data = frame(SET, k, store_ext(), b"x" * 1000, opaque=1)
        slow.send(data[:10])
        eq([f[5] for f in fast.req(frame(SET, k + b"f", store_ext(), b"y", opaque=2) +
                                    frame(GET, k + b"f", opaque=3))], [0, 0])
        slow.send(data[10:500])
        eq(fast.req(frame(GET, k, opaque=4))[0][5], 1)
        slow.send(data[500:])
        eq([f[5] for f in slow.req(frame(GET, k, opaque=5))], [0, 0])


@R.test
def a_frame_header_not_whole_times_out_as_a_text_line(env):
    """client_header_timeout (slowloris) holds for a binary frame's header as for a line."""
    p = Proxy({"slow": {"hash": "md5", "distribution": "ketama", "timeout": 10000,
                        "servers": server_lines(env.one_srv, ["a"])}},
              glob={"client_header_timeout": 1})
    try:
        with Bin(p.addr(), timeout=harness.patience(10)) as c:
            eq([f[5] for f in c.req(frame(NOOP, opaque=1))], [0])
            t0 = time.monotonic()
            c.send(frame(GET, b"k")[:10])
            eq(c.rest(), [])                   # closed, nothing answered
            check(c.eof and time.monotonic() - t0 < harness.patience(8),
                  "closed by client_header_timeout")
    finally:
        p.stop()


@R.test
def values_large_and_too_large(env):
    k = unique()
    big = bytes(range(256)) * 2048           # 512 KiB
    huge = b"z" * (2 * 1024 * 1024)           # over the 1 MiB item size

    def run(c):
        return c.req(frame(SET, k, store_ext(), big, opaque=1) +
                     frame(GET, k, opaque=2) +
                     frame(SET, k + b"h", store_ext(), huge, opaque=3) +   # E2BIG, swallowed
                     frame(SETQ, k + b"h", store_ext(), huge, opaque=4) +  # said though quiet
                     frame(APPEND, k, val=huge, opaque=5) +
                     frame(GET, k + b"h", opaque=6))
    same(env, run)


@R.test
def a_large_value_streams_through(env):
    """A value far over the read size, asked first on a fresh connection (the proxy
    streams such a value into the client's output as it arrives), read late."""
    k = unique()
    big = bytes(range(256)) * 3800             # 950 KiB
    for c in (env.direct(), env.one()):
        with c:
            eq([f[5] for f in c.req(frame(SET, k, store_ext(7, 0), big, opaque=1))], [0])
    got = []
    for c in (env.direct(), env.one()):
        with c:
            c.send(frame(GETK, k, opaque=2) + frame(GET, k + b"miss", opaque=3) + noop_end())
            time.sleep(0.2)                    # the reply waits in the proxy meanwhile
            frames, closed = c.until_end()
            got.append((norm(frames), closed))
    eq(got[1], got[0])
    eq(got[0][0][0][9], b"\0\0\0\7" + k + big)


@R.test
def text_clients_are_unchanged(env):
    with harness.Raw(env.proxy.addr("one")) as t:
        k = unique()
        eq(t.mc_store(b"set", k, b"text"), b"STORED\r\n")
        eq(t.mc_get(b"get", k), [(k, 0, b"text", None)])
    with env.one() as c:
        f, = c.req(frame(GET, k, opaque=9))
        eq((f[5], f[9]), (0, b"\0\0\0\0text"))


# ---------------------------------------------------------------- routing

@R.test
def keys_go_to_their_owners(env):
    k = unique()
    keys = [k + b"-%d" % i for i in range(30)]
    with env.three() as c:
        eq([f[5] for f in c.req(b"".join(frame(SET, x, store_ext(), x, opaque=i)
                                         for i, x in enumerate(keys)))], [0] * len(keys))
        # a getkq run: every hit, in request order, misses silent
        want = keys[::2]
        req = b"".join(frame(GETKQ, x, opaque=i) for i, x in enumerate(want))
        req += b"".join(frame(GETKQ, x + b"miss") for x in want)
        got = c.req(req)
        eq([f[9][4:4 + f[2]] for f in got], want)
        eq([f[7] for f in got], list(range(len(want))))
    owners = ring_owners(env.proxy.conf_path, "three", keys)
    by_name = dict(zip(["a", "b", "c"], env.backends))
    used = set()
    for x in keys:
        srv = by_name[owners[x]]
        used.add(owners[x])
        with srv.client() as t:
            eq(t.mc_get(b"get", x), [(x, 0, x, None)], "key %r on its owner %s" % (x, owners[x]))
    check(len(used) == 3, "the keys spread over the 3 servers (%s)" % sorted(used))


if __name__ == "__main__":
    R.main(Env)

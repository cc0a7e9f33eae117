"""test_hostile.py: hostile and odd requests never touch another client's replies.

For each protocol, an attacker connection sends a corpus of requests the backend could
read differently from the proxy (NUL at every position, every number form, CR/LF
variants, long lines, truncation at every byte, control bytes in keys, the memcached
binary protocol, quotes and escapes inline) through a pool with one backend,
`server_connections: 1` and one worker, so attacker and victims share the one backend
connection. Meanwhile victim connections run verified traffic (each sets and reads its
own keys with unique values): every victim reply must be byte-exact and arrive within
VICTIM_WAIT seconds. Each attacker request gets what docs/protocol-memcache.md and
docs/redis.md say: where the proxy forwards, the reply is the one the real server gives
to the same bytes sent straight at it (the reference); where it refuses, the error the
docs name, and the connection is closed when the docs say so.

Also here: a Redis ACL user as the docs give it, so that a script cannot flush, select
or migrate through the proxy (the backend's ACL is the boundary).
"""

import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Memcached, Proxy, Raw, Redis, RespError, Runner, Skip,  # noqa: E402
                     check, eq, resp_encode, server_lines, stop_all)

from harness import patience  # noqa: E402  (bounds against a hang, scaled)
R = Runner("test_hostile", per_test_timeout=60, total_timeout=150)
VICTIM_WAIT = 3.0     # seconds a victim waits for one reply (pool timeout is 2 s)
REPLY_WAIT = 2.0      # seconds an attacker waits for the replies to one case
SEED = int(os.environ.get("RL_HOSTILE_SEED", "12"))
# Keys are written with "@TAG@" (5 bytes), replaced by "P" or "S" and 4 more bytes so
# that RESP lengths stay right: the proxy's and the server's keys differ only there.
TAG = b"%04d" % (os.getpid() % 10000)

MC_ERROR = b"ERROR\r\n"
MC_BAD = b"CLIENT_ERROR bad command line format\r\n"
MC_TOO_LONG = b"CLIENT_ERROR line too long\r\n"
RD_NUL_INLINE = b"-ERR Protocol error: NUL byte in inline request\r\n"
RD_NUL_HEADER = b"-ERR Protocol error: NUL byte in a header line\r\n"


class Env(harness.Env):
    """One memcached and one redis-server, each the only server of a pool with one
    server connection, behind a proxy with one worker."""

    def __init__(self):
        if os.environ.get("RL_PROXY_ADDR") or os.environ.get("RL_REDIS_PROXY_ADDR"):
            raise Skip("needs its own backends to send the reference requests to")
        if os.environ.get("RL_PROXY", "ringleader") != "ringleader":
            raise Skip("documents ringleader's behaviour")
        self.mc = Memcached.start()
        self.rd = Redis.start()
        common = {"hash": "fnv1a_64", "distribution": "ketama", "timeout": 2000,
                  "server_connections": 1, "auto_eject_hosts": False}
        self.proxy = Proxy({
            "mc": dict(common, servers=server_lines([self.mc], ["m1"])),
            "rd": dict(common, redis=True, servers=server_lines([self.rd], ["r1"])),
        }, workers=1)
        self.others = self.proxies = []
        self.backends = [self.mc, self.rd]


# ---------------------------------------------------------------- victims

class Victims:
    """n threads, each on its own proxy connection, storing and reading back its own
    keys with unique values until stop(); any wrong or late reply is recorded."""

    def __init__(self, addr, redis, n=3):
        self.addr, self.redis = addr, redis
        self.stop_ev = threading.Event()
        self.errors = []
        self.rounds = [0] * n
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(n)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        for t in self.threads:
            t.join(patience(VICTIM_WAIT * 3))

    def _run(self, i):
        rnd = random.Random(SEED * 100 + i)
        try:
            with Raw(self.addr, timeout=VICTIM_WAIT) as c:
                n = 0
                while not self.stop_ev.is_set() and n < 200000:
                    n += 1
                    key = b"victim-%d-%d-%d" % (os.getpid(), i, n % 50)
                    val = b"%d:%d:%x" % (i, n, rnd.getrandbits(64))
                    if self.redis:
                        self._redis_round(c, key, val)
                    else:
                        self._mc_round(c, key, val)
                    self.rounds[i] += 1
        except Exception as e:   # noqa: BLE001 - reported by check()
            self.errors.append("victim %d round %d: %r" % (i, self.rounds[i], e))

    @staticmethod
    def _mc_round(c, key, val):
        c.send(b"set %s 0 0 %d\r\n%s\r\nget %s\r\n" % (key, len(val), val, key))
        want = b"STORED\r\nVALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(val), val)
        got = c.read_exact(len(want))
        if got != want:
            raise AssertionError("got %r want %r" % (got, want))

    @staticmethod
    def _redis_round(c, key, val):
        c.send(resp_encode("SET", key, val) + resp_encode("GET", key))
        want = b"+OK\r\n$%d\r\n%s\r\n" % (len(val), val)
        got = c.read_exact(len(want))
        if got != want:
            raise AssertionError("got %r want %r" % (got, want))

    def check(self, min_rounds=20):
        check(not self.errors, "victims: %s", "; ".join(self.errors[:3]))
        check(min(self.rounds) >= min_rounds, "victims made too few rounds: %r", self.rounds)


# ---------------------------------------------------------------- attacker

def exchange(addr, data, sentinel, closes=False):
    """Send data on a fresh connection, read until the replies end with sentinel (or the
    peer closes, when closes). Returns (replies, closed)."""
    with Raw(addr, timeout=REPLY_WAIT) as c:
        c.send(data)
        if closes:
            deadline = time.monotonic() + patience(REPLY_WAIT)
            try:
                while True:
                    c._fill(deadline)
            except EOFError:
                return bytes(c.buf), True
            except TimeoutError:
                return bytes(c.buf), False
        got = c.read_until(lambda b: len(b) if b.endswith(sentinel) else None)
        return got, False


class Cases:
    """The attacker's corpus for one protocol: (name, bytes, expectation) where the
    expectation is "server" (the reply the real server gives to the same bytes, with the
    key tag swapped), "server-closed" / "server-any" (Redis: the server's replies and
    whether it closes), bytes (a refusal, then the sentinel), or ("closed", prefix)."""

    def __init__(self):
        self.items = []

    def add(self, name, data, expect):
        self.items.append((name, data, expect))


def run_cases(cases, proxy_addr, server_addr, sentinel, tag):
    """Every case through the proxy (tag "P") and, for "server" ones, straight at the
    server (tag "S"); returns the list of mismatches."""
    bad = []
    for name, data, expect in cases:
        pdata = data.replace(b"@TAG@", b"P" + tag)
        if isinstance(expect, tuple):
            got, closed = exchange(proxy_addr, pdata, sentinel, closes=True)
            if not closed or not got.startswith(expect[1]):
                bad.append("%s: proxy %r closed=%s, want %r then close" % (
                    name, got[:120], closed, expect[1]))
            continue
        try:
            got, _ = exchange(proxy_addr, pdata + sentinel_req(sentinel), sentinel)
        except (TimeoutError, EOFError) as e:
            bad.append("%s: proxy: %s" % (name, e))
            continue
        if expect == "server":
            sdata = data.replace(b"@TAG@", b"S" + tag)
            try:
                want, _ = exchange(server_addr, sdata + sentinel_req(sentinel), sentinel)
            except (TimeoutError, EOFError) as e:
                bad.append("%s: server: %s" % (name, e))
                continue
            want = want.replace(b"S" + tag, b"P" + tag)
        else:
            want = expect + sentinel
        if got != want:
            bad.append("%s %r: proxy %r, want %r" % (name, pdata[:80], got[:160], want[:160]))
    return bad


def sentinel_req(sentinel):
    return b"mn\r\n" if sentinel == b"MN\r\n" else b"PING\r\n"


def nul_at_each(line, step=1):
    """line with a NUL inserted before byte i, for each i of its content."""
    end = len(line) - (2 if line.endswith(b"\r\n") else 1)
    return [(i, line[:i] + b"\0" + line[i:]) for i in range(0, end + 1, step)]


def hold_truncated(addr, requests, positions):
    """Connections that each stop inside a request (every byte position of each
    request, sampled to `positions` per request): they are held open while the victims
    run, then closed. A partial request must never reach the shared connection."""
    conns = []
    for r in requests:
        cut = sorted(set([1, len(r) - 1] + random.Random(SEED).sample(
            range(1, len(r)), min(positions, len(r) - 1))))
        for i in cut:
            c = Raw(addr, timeout=REPLY_WAIT)
            c.send(r[:i])
            conns.append(c)
    return conns


# ---------------------------------------------------------------- memcached

# memcached's binary "Unknown command" reply to a noop frame (opaque 0): the opcode at [1]
BIN_UNKNOWN = (b"\x81\x0a\x00\x00\x00\x00\x00\x81\x00\x00\x00\x0f" + b"\x00" * 12 +
               b"Unknown command")


def mc_cases():
    k = b"@TAG@k"
    cs = Cases()
    # NUL at every position of every kind of line (the attacker of issue 12 first)
    lines = [
        b"incr %sn 1 noreply\r\n" % k, b"decr %sn 1 noreply\r\n" % k,
        b"set %ss 0 0 1 noreply\r\n" % k, b"add %sa 0 0 1 noreply\r\n" % k,
        b"cas %sc 0 0 1 1 noreply\r\n" % k,
        b"delete %sd noreply\r\n" % k, b"delete %sd 0 noreply\r\n" % k,
        b"touch %st 10 noreply\r\n" % k, b"get %sg %sh\r\n" % (k, k),
        b"gets %sg\r\n" % k, b"gat 10 %sg\r\n" % k, b"mg %sg v k q\r\n" % k,
        b"md %sd q\r\n" % k, b"ma %sn q\r\n" % k, b"verbosity 1 noreply\r\n",
    ]
    for line in lines:
        store = line.split(b" ")[0] in (b"set", b"add", b"cas")
        for i, nl in nul_at_each(line):
            # storage lines carry a data block: memcached reads it as a command
            # when the line is refused, and so does the proxy
            cs.add("nul@%d %s" % (i, line[:4].decode()), nl + (b"x\r\n" if store else b""),
                   "server")
    # every number form, in every numeric slot
    forms = [b"1", b"+1", b"01", b"-0", b"0", b"+0", b"-1", b"00001"]
    for f in forms:
        cs.add("set flags %r" % f, b"set %sf 0 0 1\r\nx\r\nset %sf %s 0 1\r\ny\r\nget %sf\r\n"
               % (k, k, f, k), "server")
        cs.add("set exptime %r" % f, b"set %se 0 %s 1\r\nx\r\n" % (k, f), "server")
        cs.add("incr %r" % f, b"set %si 0 0 1\r\n5\r\nincr %si %s\r\n" % (k, k, f), "server")
        cs.add("touch %r" % f, b"set %st 0 0 1\r\n5\r\ntouch %st %s\r\n" % (k, k, f), "server")
        cs.add("cas unique %r" % f, b"cas %sc 0 0 1 %s\r\nx\r\n" % (k, f), "server")
        cs.add("gat %r" % f, b"gat %s %sg\r\n" % (f, k), "server")
        cs.add("ms %r" % f, b"ms %sm %s T%s\r\nx\r\n" % (k, f, f) if f != b"-1" else b"",
               "server")
    for f in [b"0", b"1", b"+1", b"01", b"-0"]:
        cs.add("set bytes %r" % f, b"set %sb 0 0 %s\r\n%s\r\nget %sb\r\n" % (
            k, f, b"x" if f.strip(b"+-0") else b"", k), "server")
    # refused: what memcached would truncate, or read only up to a blank
    cs.add("flags 2^32", b"set %sf 4294967296 0 1\r\nx\r\n" % k, MC_BAD + MC_ERROR)
    cs.add("bytes 99999999999", b"set %sb 0 0 99999999999\r\n" % k, MC_BAD)
    cs.add("exptime 2^31", b"set %se 0 2147483648 1\r\nx\r\n" % k, MC_BAD + MC_ERROR)
    cs.add("bytes with tab", b"set %sb 0 0 1\t\r\nx\r\n" % k, MC_BAD + MC_ERROR)
    # CR/LF variants
    cs.add("bare LF", b"set %sl 0 0 1\nx\r\nget %sl\n" % (k, k), "server")
    cs.add("CRLF only", b"\r\n", "server")
    cs.add("LF only", b"\n", "server")
    cs.add("CR CR LF", b"get %sr\r\r\n" % k, MC_BAD)
    cs.add("CR inside", b"get %sr\rx\r\n" % k, MC_BAD)
    cs.add("spaces", b"   get    %sg   \r\n" % k, "server")
    cs.add("tab in key", b"set %s\tt 0 0 1\r\nx\r\nget %s\tt\r\n" % (k, k), "server")
    # control bytes in keys (memaslap uses \x10), oversized keys
    cs.add("ctl keys", b"set %s\x10\x01\x7f 0 0 1\r\nx\r\nget %s\x10\x01\x7f\r\n" % (k, k),
           "server")
    cs.add("key 250", b"get %s%s\r\n" % (k, b"k" * (250 - len(k) - 1)), "server")
    cs.add("key 251", b"get %s%s\r\n" % (k, b"k" * (251 - len(k) - 1)), "server")
    cs.add("set key 251", b"set %s%s 0 0 1\r\nx\r\n" % (k, b"k" * (251 - len(k) - 1)),
           "server")
    # wrong token counts and empty requests
    for line in [b"set\r\n", b"set %sx 0 0\r\n" % k, b"incr %sx\r\n" % k, b"delete\r\n",
                 b"touch %sx\r\n" % k, b"get\r\n", b"mg\r\n", b"bogus\r\n", b"  \r\n"]:
        cs.add("tokens %r" % line, line, "server")
    # long lines: a 1,500-key multi-get passes; a 3 KiB gat and a long
    # unterminated set are refused and closed (memcached closes on them too)
    many = b" ".join(b"%sm%d" % (k, j) for j in range(1500))
    cs.add("get 1500 keys", b"set %sm7 0 0 1\r\nz\r\nget %s\r\n" % (k, many), "server")
    cs.add("gat 3 KiB", b"gat 10 " + b" ".join(b"%sg%d" % (k, j) for j in range(300)) +
           b"\r\n", ("closed", MC_TOO_LONG))
    cs.add("set 3 KiB", b"set " + b"k" * 3000, ("closed", MC_TOO_LONG))
    # the binary protocol (test_memcache_binary.py has the rest): a header whose key is
    # longer than its body is answered "Unknown command" and closed, as memcached does
    cs.add("binary", b"\x80\x0a\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
           b"\x00\x00\x00\x00\x00\x00\x00\x00", ("closed", BIN_UNKNOWN))
    return cs.items


def attack(addr, redis, partial, run):
    """Victims on addr and connections held inside the partial requests while
    run() sends the attacker's cases; returns its mismatches after checking the
    victims."""
    with Victims(addr, redis=redis) as v:
        held = hold_truncated(addr, partial, 12)
        bad = run()
        time.sleep(0.3)         # victims keep going with the partial requests held
        for c in held:
            c.close()
        time.sleep(0.2)
    v.check()
    return bad


@R.test
def memcache_attacker_and_victims(env):
    addr, srv = env.proxy.addr("mc"), env.mc.addr
    cases = [c for c in mc_cases() if c[1]]
    bad = attack(addr, False, [b"set hold 0 0 5 noreply\r\nvalue\r\n", b"get a b c\r\n",
                               b"incr n 1 noreply\r\n"],
                 lambda: run_cases(cases, addr, srv, b"MN\r\n", TAG))
    check(not bad, "%d of %d memcache cases differ:\n  %s", len(bad), len(cases),
          "\n  ".join(bad[:12]))


@R.test
def memcache_binary_bad_lengths_close_at_once(env):
    with env.proxy.client("mc") as c:
        t0 = time.monotonic()
        # a set whose key (3 bytes) is longer than its body (0): memcached's answer, closed
        c.send(b"\x80\x01\x00\x03" + b"\x00" * 20)
        check(c.closed(timeout=patience(1.0)), "binary request: the connection stays open")
        check(time.monotonic() - t0 < patience(1.0), "binary request closed late")
        eq(bytes(c.buf), b"\x81\x01" + BIN_UNKNOWN[2:])


# ---------------------------------------------------------------- redis

def rd_cases():
    k = b"@TAG@k"
    cs = Cases()
    # NUL at every position of an inline line: Redis would wait forever
    for line in [b"GET %s\r\n" % k, b"SET %s v\r\n" % k]:
        for i, nl in nul_at_each(line):
            cs.add("inline nul@%d" % i, nl, ("closed", RD_NUL_INLINE))
    # ... of a RESP request. Inside a header line ("*3", "$5") the proxy refuses
    # and closes (Redis looks for the '\r' with strchr and would wait forever);
    # anywhere else Redis's own reading is the reference: a NUL in a bulk is data,
    # one that shifts the framing gives Redis's own protocol error.
    # (its own key: some of these are executed through the proxy only)
    req = resp_encode("SET", b"@TAG@w", "v")
    for i in range(len(req) + 1):
        nl = req[:i] + b"\0" + req[i:]
        start = max(req.rfind(b"*", 0, i), req.rfind(b"$", 0, i))
        in_header = (start >= 0 and b"\r" not in req[start:i] and i > start) or \
            req[i:i + 1] == b"$"        # Redis looks for a bulk line's '\r' first
        if i == 0:                      # the NUL starts a request: an inline one
            cs.add("resp nul@0", nl, ("closed", RD_NUL_INLINE))
        elif i == len(req):             # ... after a whole SET, which is answered
            cs.add("resp nul@%d" % i, nl, ("closed", b"+OK\r\n" + RD_NUL_INLINE))
        elif in_header:
            cs.add("resp nul@%d (header)" % i, nl, ("closed", RD_NUL_HEADER))
        else:
            cs.add("resp nul@%d" % i, nl, "server-any")
    # a NUL byte as data (same length) is data
    j0 = req.index(b"@TAG@w") + 5
    cs.add("resp nul data", req[:j0] + b"\0" + req[j0 + 1:] +
           resp_encode("GET", b"@TAG@\0"), "server")
    # every number form Redis rejects: the same error, and the connection closes
    for bad in [b"*01\r\n", b"*-0\r\n", b"*+1\r\n", b"* 1\r\n", b"*1 \r\n", b"*00\r\n",
                b"*1\r\n$04\r\n", b"*1\r\n$-0\r\n", b"*1\r\n$+4\r\n", b"*1\r\n$4 \r\n",
                b"*1\r\n$ 4\r\n", b"*2147483648\r\n", b"*1\r\n$99999999999999999999\r\n"]:
        cs.add("number %r" % bad, bad + b"PING\r\n", "server-closed")
    # forms Redis reads: empty requests, the byte after '\r' taken as the '\n'
    cs.add("*0 *-5", b"*0\r\n*-5\r\n" + resp_encode("GET", k), "server")
    cs.add("CR any", b"*2\rX$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k), "server")
    # inline quoting, escapes and blanks, as sdssplitargs splits them
    for line in [b'SET "%s a" "x\\ny\\x41\\x4g\\q"\r\nGET "%s a"\r\n' % (k, k),
                 b"SET '%s b' 'it\\'s'\r\nGET '%s b'\r\n" % (k, k),
                 b'SET %s"c d" v\r\nGET "%sc d"\r\n' % (k, k),
                 b"SET %s\x0be \x0cv\r\nGET %s\x0be\r\n" % (k, k),
                 b"GET %s\rx\r\n" % k, b"GET %s\r\r\n" % k, b'GET ""\r\n',
                 b"\r\n\r\n  \t\r\nGET %s\r\n" % k, b"get %s\n" % k,
                 b'MSET "%s m" 1 %sn "2 2"\r\nMGET "%s m" %sn\r\n' % (k, k, k, k),
                 b"EXISTS %s %s\r\n" % (k, k),
                 b'ECHO "a\\x41 b\\n" c\r\n', b"PING 'x y'\r\n", b"ECHO a\x0bb\r\n"]:
        cs.add("inline %r" % line[:30], line, "server")
    for line in [b'GET "%s\r\n' % k, b'GET "a"b\r\n', b"GET 'a\r\n", b'GET "a\\\r\n']:
        cs.add("unbalanced %r" % line, line, "server-closed")
    # long lines: Redis and the proxy refuse an unterminated inline line past 64 KiB
    cs.add("inline 70 KiB", b"GET " + b"a" * 70000, "server-closed")
    return cs.items


def exchange_any(addr, data, sentinel):
    """Send data then a PING; read until the PONG or until the peer closes.
    Returns (replies, closed)."""
    with Raw(addr, timeout=REPLY_WAIT) as c:
        c.send(data + b"PING\r\n")
        deadline = time.monotonic() + patience(REPLY_WAIT)
        try:
            while not bytes(c.buf).endswith(sentinel):
                c._fill(deadline)
            return bytes(c.buf), False
        except EOFError:
            return bytes(c.buf), True
        except TimeoutError:
            return bytes(c.buf), False


def run_redis_cases(env, cases):
    """The "server-closed" and "server-any" cases compare the proxy's replies and
    whether it closed with redis-server's for the same bytes."""
    addr, srv = env.proxy.addr("rd"), env.rd.addr
    plain = [(n, d, e) for n, d, e in cases if e not in ("server-closed", "server-any")]
    bad = run_cases(plain, addr, srv, b"+PONG\r\n", TAG)
    for name, data, how in cases:
        if how not in ("server-closed", "server-any"):
            continue
        pdata = data.replace(b"@TAG@", b"P" + TAG)
        sdata = data.replace(b"@TAG@", b"S" + TAG)
        if how == "server-closed":
            got, pc = exchange(addr, pdata, b"", closes=True)
            want, sc = exchange(srv, sdata, b"", closes=True)
        else:
            got, pc = exchange_any(addr, pdata, b"+PONG\r\n")
            want, sc = exchange_any(srv, sdata, b"+PONG\r\n")
        want = want.replace(b"S" + TAG, b"P" + TAG)
        if (got, pc) != (want, sc):
            bad.append("%s %r: proxy %r closed=%s, redis %r closed=%s" % (
                name, pdata[:60], got[:100], pc, want[:100], sc))
    return bad


@R.test
def redis_attacker_and_victims(env):
    cases = rd_cases()
    bad = attack(env.proxy.addr("rd"), True,
                 [resp_encode("SET", "hold", "v" * 40), b"SET hold inline\r\n"],
                 lambda: run_redis_cases(env, cases))
    check(not bad, "%d of %d redis cases differ:\n  %s", len(bad), len(cases),
          "\n  ".join(bad[:12]))


# ---------------------------------------------------------------- the ACL boundary

ACL_RULES = ["~*", "&*", "+@all", "-@dangerous", "-@admin", "-select", "-move", "-copy"]


@R.test
def redis_acl_user_stops_scripts(env):
    """docs/redis.md's ACL line for the proxy's user: through the proxy a script cannot
    flush, select another database or migrate; the data stays."""
    pw = "acl-pw-%d" % os.getpid()
    srv = Redis.start(extra=["--user", "ringleader", "on", ">" + pw] + ACL_RULES)
    env.others.append(srv)
    common = {"hash": "fnv1a_64", "distribution": "ketama", "timeout": 2000,
              "server_connections": 1, "auto_eject_hosts": False, "redis": True,
              "redis_username": "ringleader", "redis_auth": pw,
              "servers": server_lines([srv], ["a1"])}
    proxy = Proxy({"acl": dict(common), "noscripts": dict(common, scripts=False)}, workers=1)
    env.others.append(proxy)
    with srv.client() as direct:
        eq(direct.rd("SET", "acl:k", "kept"), "OK")
    with proxy.client("acl") as c:
        eq(c.rd("AUTH", pw), "OK")               # redis_auth is the clients' password too
        eq(c.rd("GET", "acl:k"), b"kept")        # the hello authenticated as the ACL user
        eq(c.rd("EVAL", "return redis.call('get', KEYS[1])", 1, "acl:k"), b"kept")
        for script, keys in [("return redis.call('flushall')", []),
                             ("return redis.call('flushdb')", []),
                             ("return redis.call('select', '1')", []),
                             ("return redis.call('keys', '*')", []),
                             ("return redis.call('migrate', '127.0.0.1', '1', KEYS[1], '0', '100')",
                              ["acl:k"]),
                             ("return redis.call('move', KEYS[1], '1')", ["acl:k"])]:
            r = c.rd("EVAL", script, len(keys), *keys)
            check(isinstance(r, RespError) and "can't run this command" in str(r),
                  "%s through the proxy: %r", script, r)
        eq(c.rd("GET", "acl:k"), b"kept")
    with srv.client() as direct:
        eq(direct.rd("GET", "acl:k"), b"kept")
        eq(direct.rd("DBSIZE"), 1)
    with proxy.client("noscripts") as c:
        eq(c.rd("AUTH", pw), "OK")
        r = c.rd("EVALSHA", "0" * 40, 0)
        check(isinstance(r, RespError) and "scripts: false" in str(r), "scripts: false: %r", r)
        eq(c.rd("GET", "acl:k"), b"kept")


if __name__ == "__main__":
    try:
        R.main(Env)
    finally:
        stop_all()

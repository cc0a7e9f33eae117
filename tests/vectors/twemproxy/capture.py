#!/usr/bin/env python3
"""capture.py: record where the real nutcracker places keys, by the procedure of README.md.

    tests/vectors/twemproxy/capture.py NAME.yml [NAME.yml ...]

For each file: four memcached on 127.0.0.1:41001..41004 are flushed, nutcracker is started
on the file (its pool must listen on 127.0.0.1:41000 with those four servers), key:0 ..
key:19999 are set through it, nutcracker is stopped, and each memcached is asked directly
which keys it holds. NAME.tsv.gz gets one `key<TAB>label` row per key, in the order set.
Only run by hand (it needs those ports free); the files it writes are committed.
"""

import gzip
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

PORTS = [41001, 41002, 41003, 41004]
PROXY = ("127.0.0.1", 41000)
KEYS = [b"key:%d" % i for i in range(20000)]


def wait_port(port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("nothing listens on %d" % port)


def request(sock, data, until):
    sock.sendall(data)
    buf = b""
    while not buf.endswith(until):
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("connection closed; have %r" % buf[-200:])
        buf += chunk
    return buf


def labels(yml):
    """port -> label (the server's name, else host:port) from the file's server lines."""
    out = {}
    for line in open(yml):
        s = line.strip()
        if s.startswith("- 127.0.0.1:"):
            spec = s[2:].split()
            host, port, _w = spec[0].rsplit(":", 2)
            out[int(port)] = spec[1] if len(spec) > 1 else "%s:%s" % (host, port)
    return out


def capture(yml, tmp):
    names = labels(yml)
    for port in PORTS:
        with socket.create_connection(("127.0.0.1", port)) as s:
            request(s, b"flush_all\r\n", b"OK\r\n")
    time.sleep(1.1)
    log = os.path.join(tmp, "nc.log")
    with socket.socket() as probe:       # the stats port only has to be free
        probe.bind(("127.0.0.1", 0))
        stats_port = probe.getsockname()[1]
    nc = subprocess.Popen(["nutcracker", "-c", yml, "-s", str(stats_port), "-a", "127.0.0.1",
                           "-i", "1000", "-o", log, "-v", "5"])
    try:
        wait_port(PROXY[1])
        with socket.create_connection(PROXY) as s:
            for i in range(0, len(KEYS), 200):
                batch = KEYS[i:i + 200]
                s.sendall(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(k), k) for k in batch))
                got = b""
                while got.count(b"\r\n") < len(batch):
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        raise SystemExit("%s: nutcracker closed the connection" % yml)
                    got += chunk
                if got != b"STORED\r\n" * len(batch):
                    raise SystemExit("%s: a set was not STORED: %r" % (yml, got[:200]))
    finally:
        nc.send_signal(signal.SIGINT)
        nc.wait(10)
    where = {}
    for port in [p for p in PORTS if p in names]:
        with socket.create_connection(("127.0.0.1", port)) as s:
            for i in range(0, len(KEYS), 100):
                reply = request(s, b"get " + b" ".join(KEYS[i:i + 100]) + b"\r\n", b"END\r\n")
                for line in reply.split(b"\r\n"):
                    if line.startswith(b"VALUE "):
                        k = line.split()[1]
                        if k in where:
                            raise SystemExit("%s: %r on two servers" % (yml, k))
                        where[k] = names[port]
    missing = [k for k in KEYS if k not in where]
    if missing:
        raise SystemExit("%s: %d keys on no server (first %r)" % (yml, len(missing), missing[0]))
    out = yml[:-4] + ".tsv.gz"
    with gzip.GzipFile(out, "wb", compresslevel=9, mtime=0) as f:
        for k in KEYS:
            f.write(k + b"\t" + where[k].encode() + b"\n")
    counts = {}
    for v in where.values():
        counts[v] = counts.get(v, 0) + 1
    print("%s: %s" % (out, " ".join("%s=%d" % kv for kv in sorted(counts.items()))))


def main():
    tmp = tempfile.mkdtemp(prefix="rl-capture-")
    mcs = [subprocess.Popen(["memcached", "-l", "127.0.0.1", "-p", str(p), "-U", "0", "-m", "64",
                             "-t", "1"] + (["-u", "root"] if os.geteuid() == 0 else []))
           for p in PORTS]
    try:
        for p in PORTS:
            wait_port(p)
        for yml in sys.argv[1:]:
            capture(yml, tmp)
    finally:
        for m in mcs:
            m.terminate()
            m.wait(10)


if __name__ == "__main__":
    main()

"""The twemproxy placement vectors under tests/vectors/twemproxy."""

import gzip
import os

from .common import VECTORS


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

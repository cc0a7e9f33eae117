"""test_ring_tool_cli.py: ringleader-ring's owner query, --balance, --diff and errors, and that it agrees with the daemon."""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Proxy, Runner, check, eq, free_port, tmpdir  # noqa: E402

R = Runner("test_ring_tool_cli", per_test_timeout=60, total_timeout=240)
WHY = "ringleader-ring is ringleader's tool"
NAMES = ["alpha", "beta", "gamma", "delta", "epsilon"]


def pool_yaml(name, n, dist="ketama", hash_="fnv1a_64", listen=22121, extra=""):
    lines = ["%s:" % name, "  listen: 127.0.0.1:%d" % listen, "  hash: %s" % hash_,
             "  distribution: %s" % dist]
    if extra:
        lines.append(extra)
    lines.append("  servers:")
    lines += ["   - 127.0.0.1:%d:1 %s" % (11211 + i, NAMES[i]) for i in range(n)]
    return "\n".join(lines) + "\n"


def write(text):
    path = os.path.join(tmpdir(), "cli-%d.yml" % len(os.listdir(tmpdir())))
    with open(path, "w") as f:
        f.write(text)
    return path


def tool(*args, stdin=None, timeout=60):
    from harness import binary
    return subprocess.run([binary("ringleader-ring")] + list(args), input=stdin,
                          capture_output=True, timeout=timeout)


def tool_json(*args):
    r = tool(*args, "--json")
    eq(r.returncode, 0, "exit status of %r (%s)" % (args, r.stderr[-300:]))
    return json.loads(r.stdout)


KEYS = ["key:%d" % i for i in range(300)] + ["user:{42}:profile", "caf\u00e9", "\u6771\u4eac"]


@R.test(ringleader=True, nutcracker_reason=WHY)
def owner_query_shows_epoch_checksum_and_a_preference_list_led_by_the_owner(env):
    conf = write(pool_yaml("cache", 4))
    r = tool("-c", conf, "key:1", "key:2")
    eq(r.returncode, 0, "exit status (%s)" % r.stderr[-300:])
    text = r.stdout.decode()
    m = re.search(r"^epoch\s+(\d+)$", text, re.M)
    check(m is not None and m.group(1) == "1", "epoch 1 in %r" % text)
    m = re.search(r"^checksum\s+([0-9a-f]{16})$", text, re.M)
    check(m is not None, "16 hex digit checksum in %r" % text)
    text_sum = m.group(1)

    doc = tool_json("-c", conf, *KEYS)
    eq(doc["epoch"], 1, "JSON epoch")
    eq(doc["checksum"], text_sum, "JSON checksum equals the text one")
    tsv = tool("-c", conf, "--tsv", stdin="".join(k + "\n" for k in KEYS).encode())
    eq(tsv.returncode, 0, "tsv exit status")
    owners = [line.rpartition(b"\t")[2].decode() for line in tsv.stdout.splitlines()]
    eq(len(doc["keys"]), len(KEYS), "one entry per key")
    for item, key, owner in zip(doc["keys"], KEYS, owners):
        eq(item["key"], key, "key passes through")
        pref = item["preference"]
        eq(len(pref), 3, "default preference length min(3, servers) for %s" % key)
        eq(len(set(pref)), len(pref), "distinct servers for %s: %r" % (key, pref))
        check(set(pref) <= set(NAMES[:4]), "known servers: %r" % pref)
        eq(pref[0], owner, "first of the preference list is the --tsv owner for %s" % key)
        eq(item["owner"], owner, "owner equals the --tsv owner for %s" % key)
    doc = tool_json("-c", conf, "-n", "9", "key:7")
    eq(sorted(doc["keys"][0]["preference"]), sorted(NAMES[:4]), "-n beyond servers: all of them")


@R.test(ringleader=True, nutcracker_reason=WHY)
def tsv_strips_cr_and_keeps_utf8_bytes(env):
    conf = write(pool_yaml("cache", 4))
    keys = [k.encode() for k in KEYS[-3:]] + [b"raw\xff\xfe"]
    plain = tool("-c", conf, "--tsv", stdin=b"".join(k + b"\n" for k in keys))
    crlf = tool("-c", conf, "--tsv", stdin=b"".join(k + b"\r\n" for k in keys))
    eq(plain.returncode, 0, "exit status")
    eq(crlf.stdout, plain.stdout, "CRLF input places the same keys")
    eq([line.rpartition(b"\t")[0] for line in plain.stdout.splitlines()], keys,
       "keys come back byte for byte")
    eq(plain.stderr, b"", "nothing on stderr")


@R.test(ringleader=True, nutcracker_reason=WHY)
def balance_of_four_equal_ketama_servers(env):
    conf = write(pool_yaml("cache", 4))
    doc = tool_json("-c", conf, "--balance", "--samples", "200000")
    eq(len(doc["pools"]), 1, "one pool")
    p = doc["pools"][0]
    eq(p["samples"], 200000, "samples")
    check(p["keyspace_exact"], "ketama shares come from the points")
    eq([s["server"] for s in p["servers"]], NAMES[:4], "servers in config order")
    for field in ("keyspace_share", "sample_share"):
        total = sum(s[field] for s in p["servers"])
        check(abs(total - 1.0) < 1e-9, "%s sums to 1: %r" % (field, total))
        check(all(s[field] > 0 for s in p["servers"]), "every server owns some %s" % field)
    shares = [s["keyspace_share"] for s in p["servers"]]
    check(abs(p["keyspace"]["max_over_mean"] - max(shares) / 0.25) < 1e-9,
          "max/mean is the max share over the mean share: %r" % p["keyspace"])
    check(p["keyspace"]["max_over_mean"] < 1.3, "keyspace max/mean %r" % p["keyspace"])
    check(p["sample"]["max_over_mean"] < 1.3, "sample max/mean %r" % p["sample"])
    r = tool("-c", conf, "--balance", "--samples", "20000")
    eq(r.returncode, 0, "text exit status")
    text = r.stdout.decode()
    check("max/mean" in text and "stddev/mean" in text, "table footer in %r" % text)
    check(all(n in text for n in NAMES[:4]), "every server in the table")


@R.test(ringleader=True, nutcracker_reason=WHY)
def diff_adding_a_fifth_server_moves_its_fair_share_to_it(env):
    old, new = write(pool_yaml("cache", 4)), write(pool_yaml("cache", 5))
    doc = tool_json("-c", old, "--diff", new, "--samples", "200000")
    eq(len(doc["pools"]), 1, "one pool")
    p = doc["pools"][0]
    eq(p["added"], ["epsilon"], "added")
    eq(p["removed"], [], "removed")
    eq(p["new_epoch"], p["old_epoch"] + 1, "epoch grows by one")
    check(p["old_checksum"] != p["new_checksum"], "checksum changes")
    check(abs(p["moved"] - 0.20) <= 0.015, "moved %r within 1.5 points of 20%%" % p["moved"])
    check(abs(p["floor"] - 0.20) <= 0.01, "floor %r" % p["floor"])
    check(p["flows"], "flows reported")
    for fl in p["flows"]:
        eq(fl["to"], "epsilon", "every moved key goes to the new server: %r" % fl)
    eq(sorted(fl["from"] for fl in p["flows"]), sorted(NAMES[:4]), "each old server gives")
    check(abs(sum(fl["fraction"] for fl in p["flows"]) - p["sample_moved"]) < 1e-9,
          "flows add up to the sampled moved fraction")
    check(abs(p["sample_moved"] - p["moved"]) < 0.02, "sampled %r vs exact %r" % (
        p["sample_moved"], p["moved"]))
    r = tool("-c", old, "--diff", new, "--samples", "20000")
    eq(r.returncode, 0, "text exit status")
    text = r.stdout.decode()
    check(re.search(r"^epoch\s+1 -> 2$", text, re.M), "epochs in %r" % text)
    check(re.search(r"^added\s+epsilon$", text, re.M), "added in %r" % text)
    check("-> epsilon" in text, "a flow in %r" % text)


@R.test(ringleader=True, nutcracker_reason=WHY)
def diff_of_identical_files_moves_nothing(env):
    a, b = write(pool_yaml("cache", 4)), write(pool_yaml("cache", 4, listen=22199))
    p = tool_json("-c", a, "--diff", b)["pools"][0]
    eq(p["moved"], 0.0, "moved")
    eq(p["old_epoch"], p["new_epoch"], "epoch")
    eq(p["old_checksum"], p["new_checksum"], "checksum (the listen address is not placement)")
    eq((p["added"], p["removed"], p["flows"]), ([], [], []), "no servers or flows")


@R.test(ringleader=True, nutcracker_reason=WHY)
def diff_reports_new_and_removed_pools(env):
    old = write(pool_yaml("cache", 4))
    new = write(pool_yaml("cache", 4) + pool_yaml("fresh", 2, listen=22122))
    pools = {p["pool"]: p for p in tool_json("-c", old, "--diff", new)["pools"]}
    eq(sorted(pools), ["cache", "fresh"], "pools in either file")
    eq(pools["fresh"]["new_epoch"], 1, "a new pool starts at epoch 1")
    eq(pools["fresh"]["old_epoch"], None, "no old epoch")
    eq(pools["fresh"]["added"], NAMES[:2], "its servers are added")
    back = {p["pool"]: p for p in tool_json("-c", new, "--diff", old)["pools"]}
    eq(back["fresh"]["removed"], NAMES[:2], "removed pool's servers")
    eq(back["fresh"]["new_epoch"], None, "no new epoch")


@R.test(ringleader=True, nutcracker_reason=WHY)
def bad_yaml_exits_1_naming_file_and_line(env):
    conf = write(pool_yaml("cache", 4).replace("distribution: ketama",
                                               "distribution: sideways"))
    r = tool("-c", conf, "key:1")
    eq(r.returncode, 1, "exit status")
    msg = r.stderr.decode()
    check("%s:4:" % conf in msg, "file:line in %r" % msg)
    check("distribution" in msg, "key named in %r" % msg)
    eq(r.stdout, b"", "nothing on stdout")
    r = tool("-c", write(pool_yaml("cache", 4)), "--diff", conf)
    eq(r.returncode, 1, "a bad --diff file fails too")
    check("%s:4:" % conf in r.stderr.decode(), "file:line of the new file")


@R.test(ringleader=True, nutcracker_reason=WHY)
def unknown_pool_exits_2_listing_the_pools(env):
    conf = write(pool_yaml("cache", 4) + pool_yaml("sessions", 2, listen=22122))
    for args in (["-p", "nope", "key:1"], ["-p", "nope", "--balance"], ["key:1"]):
        r = tool("-c", conf, *args)
        eq(r.returncode, 2, "exit status for %r" % args)
        msg = r.stderr.decode()
        check("cache" in msg and "sessions" in msg, "pools listed in %r" % msg)
    r = tool("-c", conf, "-p", "sessions", "--tsv", "key:1")
    eq(r.returncode, 0, "a known pool")
    check(r.stdout.split(b"\t")[1].strip() in (b"alpha", b"beta"), "owner %r" % r.stdout)


@R.test(ringleader=True, nutcracker_reason=WHY)
def a_cluster_pool_is_refused_and_pointed_to_the_cluster_modes(env):
    # A redis_cluster pool's servers are seeds: the slot map places keys, so a "ring" of the
    # seeds would name a seed as the owner under a checksum no proxy has (it did, exit 0).
    cluster = ("cl:\n  listen: 127.0.0.1:22123\n  redis: true\n  redis_cluster: true\n"
               "  servers:\n" + "".join("   - 127.0.0.1:%d:1\n" % (7000 + i) for i in range(3)))
    both = write(pool_yaml("cache", 2) + cluster)
    alone = write(cluster)
    for conf, args in ((both, ["-p", "cl", "key:1"]), (both, ["-p", "cl", "--tsv", "key:1"]),
                       (both, ["-p", "cl", "--json", "key:1"]), (alone, ["key:1"]),
                       (both, ["-p", "cl", "--balance"])):
        r = tool("-c", conf, *args)
        eq(r.returncode, 2, "exit status for %r (stdout %r)" % (args, r.stdout[-200:]))
        eq(r.stdout, b"", "no owner printed for %r" % args)
        msg = r.stderr.decode()
        check("'cl'" in msg and "--cluster " in msg and "--cluster-shards" in msg,
              "the message names the pool and both cluster modes: %r" % msg)
    r = tool("-c", both, "--diff", both, "-p", "cl")
    eq(r.returncode, 2, "--diff -p on the cluster pool (stdout %r)" % r.stdout[-200:])
    check("--cluster-shards" in r.stderr.decode(), "--diff's message: %r" % r.stderr)
    r = tool("-c", both, "-p", "cache", "--tsv", "key:1")
    eq(r.returncode, 0, "the file's other pool still answers (%r)" % r.stderr)
    check(r.stdout.split(b"\t")[1].strip() in (b"alpha", b"beta"), "owner %r" % r.stdout)
    # Every pool (no -p): the cluster pool is left out, with the same word on stderr.
    for args in (["--balance"], ["--diff", both]):
        doc = tool_json("-c", both, *args)
        eq([p["pool"] for p in doc["pools"]], ["cache"], "pools of %r" % args)
        r = tool("-c", both, *args)
        eq(r.returncode, 0, "exit status of %r" % args)
        check("'cl'" in r.stderr.decode(), "%r says why cl is left out: %r" % (args, r.stderr))
        check(b"pool      cache" in r.stdout and b"pool      cl" not in r.stdout,
              "%r shows cache, not cl: %r" % (args, r.stdout[:300]))


@R.test(ringleader=True, nutcracker_reason=WHY)
def tool_and_daemon_stats_show_the_same_epoch_and_checksum(env):
    servers = ["127.0.0.1:%d:1 %s" % (free_port(), n) for n in NAMES[:3]]
    pool = {"hash": "murmur", "distribution": "ketama", "hash_tag": "{}", "servers": servers}
    proxy = Proxy({"cache": pool})
    try:
        stats = proxy.stats()
    finally:
        proxy.stop()
    doc = tool_json("-c", proxy.conf_path, "key:1")
    check("cache" in stats, "pool in the stats document: %r" % sorted(stats))
    eq(stats["cache"]["epoch"], doc["epoch"], "epoch")
    eq(stats["cache"]["ring_checksum"], doc["checksum"], "checksum")


if __name__ == "__main__":
    R.main(harness.Env)   # nothing shared to start: each test starts its own

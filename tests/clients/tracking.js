// tracking.js: node-redis 5's client-side cache (RESP3, CLIENT TRACKING on) through the
// proxy: reads are served from the client's cache, and a write by another client (or the
// client itself) reaches it as an invalidation, after which it reads the new value.
//
//   node tracking.js PORT
// Prints "N passed, M failed"; exits non-zero on a failure. test_tracking.py runs it.
"use strict";

const { createClient, BasicClientSideCache } = require("redis");

const port = Number(process.argv[2]);
const deadline = setTimeout(() => { console.error("timed out"); process.exit(2); }, 40000);
let passed = 0, failed = 0;

function ok(cond, what) {
  if (cond) passed++;
  else { failed++; console.log("FAIL " + what); }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const cache = new BasicClientSideCache({ ttl: 0, maxEntries: 0, evictPolicy: "LRU" });
  const opts = { socket: { host: "127.0.0.1", port, reconnectStrategy: false } };
  const client = createClient({ ...opts, RESP: 3, clientSideCache: cache });
  const other = createClient(opts);
  client.on("error", (e) => console.error("client:", e.message));
  other.on("error", (e) => console.error("other:", e.message));
  await client.connect();
  await other.connect();

  const keys = Array.from({ length: 24 }, (_, i) => `csc:${i}`);
  let stale = 0, ownStale = 0, waits = 0;
  for (const k of keys) {
    await other.set(k, "v1");
    ok((await client.get(k)) === "v1", `${k}: first read`);
    const before = cache.stats().hitCount;
    ok((await client.get(k)) === "v1", `${k}: second read`);
    ok(cache.stats().hitCount === before + 1, `${k}: second read from the client's cache`);
  }
  // another client writes: each key's next reads return the new value once the
  // invalidation arrived (it is in flight when SET answers, as with one redis-server)
  for (const k of keys) {
    await other.set(k, "v2");
    let v;
    for (let i = 0; i < 200; i++) {
      v = await client.get(k);
      if (v === "v2") break;
      stale++;
      await sleep(5);
    }
    waits++;
    ok(v === "v2", `${k}: the new value after another client's write (got ${v})`);
    // and it is cached again
    const before = cache.stats().hitCount;
    ok((await client.get(k)) === "v2", `${k}: cached again`);
    ok(cache.stats().hitCount === before + 1, `${k}: served from the cache again`);
  }
  // the client's own write: its invalidation follows the write's reply
  for (const k of keys) {
    await client.set(k, "v3");
    let v;
    for (let i = 0; i < 200; i++) {
      v = await client.get(k);
      if (v === "v3") break;
      ownStale++;
      await sleep(5);
    }
    ok(v === "v3", `${k}: its own write read back (got ${v})`);
  }
  console.log(`reads of the old value while an invalidation was in flight: ${stale} after ` +
              `another client's ${waits} writes, ${ownStale} after its own`);
  console.log(`cache: ${JSON.stringify(cache.stats())}`);
  await client.quit();
  await other.quit();
}

main().then(() => {
  clearTimeout(deadline);
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}, (e) => {
  console.log("FAIL " + (e && e.stack ? e.stack : e));
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});

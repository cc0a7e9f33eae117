// memcache_binary.js PROXY_PORT DIRECT_PORT: memjs (binary protocol only) used as an
// application uses it, through ringleader and straight at memcached -B binary; the
// results must be equal. Prints "ok NAME" or "FAIL NAME: why" per test, then
// "N passed, N failed"; exit 1 on a failure.
'use strict';

const assert = require('assert');
const memjs = require('memjs');

const [proxyPort, directPort] = process.argv.slice(2).map(Number);
const pfx = `mj${process.pid}:`;
let passed = 0;
let failed = 0;

async function test(name, fn) {
  const timer = setTimeout(() => { console.log(`FAIL ${name}: timed out`); process.exit(1); }, 30000);
  try {
    await fn();
    passed++;
    console.log(`ok ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  } finally {
    clearTimeout(timer);
  }
}

function client(port) {
  // no retries: a wrong or missing answer must show, not be papered over
  return memjs.Client.create(`127.0.0.1:${port}`, { retries: 1, timeout: 5, conntimeout: 5,
                                                   logger: { log: () => {} } });
}

// fn(client) -> result, on both targets; the results must be equal.
async function same(fn) {
  const out = [];
  for (const port of [proxyPort, directPort]) {
    const c = client(port);
    try {
      out.push(await fn(c));
    } finally {
      c.close();
    }
  }
  assert.deepStrictEqual(out[0], out[1]);
  return out[0];
}

const str = (r) => (r && r.value !== null && r.value !== undefined
  ? { value: r.value.toString('latin1'), flags: r.flags ? r.flags.toString('hex') : null } : r);

async function main() {
  await test('set_get_add_replace_delete', () => same(async (c) => {
    const k = `${pfx}a`;
    const r = [];
    r.push(await c.set(k, 'v1', { expires: 100 }));
    r.push(str(await c.get(k)));
    r.push(await c.add(k, 'x'));
    r.push(await c.add(`${k}new`, 'n'));
    r.push(await c.replace(`${k}miss`, 'x'));
    r.push(await c.replace(k, 'v2'));
    r.push(str(await c.get(k)));
    r.push(await c.delete(`${k}new`));
    r.push(await c.delete(`${k}new`));
    r.push(str(await c.get(`${k}new`)));
    await c.delete(k);
    return r;
  }));

  await test('append_prepend_touch', () => same(async (c) => {
    const k = `${pfx}b`;
    const r = [];
    r.push(await c.set(k, 'mid'));
    r.push(await c.append(k, '>'));
    r.push(await c.prepend(k, '<'));
    r.push(str(await c.get(k)));
    r.push(await c.touch(k, 100));
    r.push(await c.touch(`${k}miss`, 100));
    r.push(await c.append(`${k}miss`, 'x').catch((e) => `error ${e.message}`));
    await c.delete(k);
    return r;
  }));

  await test('increment_decrement', () => same(async (c) => {
    const k = `${pfx}c`;
    const r = [];
    r.push(await c.increment(k, 5, { initial: 10 }));
    r.push(await c.increment(k, 5, {}));
    r.push(await c.decrement(k, 3, {}));
    r.push(str(await c.get(k)));
    await c.set(`${k}s`, 'text');
    r.push(await c.increment(`${k}s`, 1, {}).catch((e) => `error ${e.message}`));
    await c.delete(k);
    await c.delete(`${k}s`);
    return r;
  }));

  await test('large_values_and_many_keys', () => same(async (c) => {
    const big = Buffer.alloc(300 * 1024, 'q');
    const r = [];
    r.push(await c.set(`${pfx}big`, big));
    const got = await c.get(`${pfx}big`);
    r.push(got.value.length, got.value.equals(big));
    const keys = Array.from({ length: 50 }, (_, i) => `${pfx}m${i}`);
    await Promise.all(keys.map((k, i) => c.set(k, `v${i}`)));
    const vals = await Promise.all(keys.map((k) => c.get(k)));
    r.push(vals.map((v) => v.value.toString()));
    await Promise.all(keys.map((k) => c.delete(k)));
    return r;
  }));

  await test('stats', async () => {
    for (const port of [proxyPort, directPort]) {
      const c = client(port);
      try {
        const stats = await new Promise((resolve, reject) => {
          c.stats((err, server, st) => (err ? reject(err) : resolve(st)));
        });
        assert.ok(stats && 'curr_connections' in stats && 'uptime' in stats,
                  `stats from ${port}: ${JSON.stringify(stats)}`);
      } finally {
        c.close();
      }
    }
  });

  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main();

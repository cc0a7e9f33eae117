// clients.js PROXY_PORT DIRECT_PORT: ioredis and node-redis used as applications use them,
// through ringleader and straight at one redis-server; the results must be equal.
// Prints "ok NAME" or "FAIL NAME: why" per test, then "N passed, N failed"; exit 1 on a failure.
'use strict';

const assert = require('assert');
const IORedis = require('ioredis');
// node-redis 4 (npm alias redis4): executeIsolated and commandOptions({ isolated }) are 4.x API
const { createClient, commandOptions } = require('redis4');

const [proxyPort, directPort] = process.argv.slice(2).map(Number);
const tag = `{n${process.pid}}`;
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

function io(port) {
  return new IORedis({ host: '127.0.0.1', port, lazyConnect: false, maxRetriesPerRequest: 1,
                       retryStrategy: () => null });
}

async function nr(port) {
  const c = createClient({ socket: { host: '127.0.0.1', port, reconnectStrategy: false } });
  c.on('error', () => {});
  await c.connect();
  return c;
}

// On both targets: fn(client, which) -> result; the results must be equal.
async function same(make, close, fn) {
  const out = [];
  for (const port of [proxyPort, directPort]) {
    const c = await make(port);
    try {
      out.push(await fn(c, port === proxyPort ? 'proxy' : 'direct'));
    } finally {
      await close(c);
    }
  }
  assert.deepStrictEqual(out[0], out[1]);
  return out[0];
}

const ioClose = async (c) => c.quit();
const nrClose = async (c) => c.quit();

async function main() {
  await test('ioredis multi', () => same(io, ioClose, async (r) => {
    const k = `${tag}io:m`;
    await r.del(k, `${k}l`);
    const res = await r.multi().set(k, '1').incr(k).incrby(k, 5).get(k)
      .lpush(`${k}l`, 'a', 'b').lrange(`${k}l`, 0, -1).exec();
    const bad = await r.multi().set(k, 'x').lpush(k, 'y').get(k).exec();   // an error in EXEC
    return [res, bad.map(([e, v]) => [e ? e.message : null, v])];
  }));

  await test('ioredis multi with a key elsewhere is refused', async () => {
    const r = io(proxyPort);
    try {
      let err = null;
      // fnv1a under ketama clusters similar keys: random ones spread over the servers
      const keys = Array.from({ length: 32 }, () => require('crypto').randomBytes(8).toString('hex'));
      for (let i = 1; i < keys.length && !err; i++) {
        try {
          await r.multi().set(keys[0], '1').set(keys[i], '2').exec();
          await r.del(keys[0], keys[i]);
        } catch (e) {
          err = e;
        }
      }
      assert.ok(err && /EXECABORT|CROSSSLOT/.test(err.message), `refused: ${err}`);
      assert.strictEqual(await r.ping(), 'PONG');
    } finally {
      await r.quit();
    }
  });

  await test('ioredis watch retry loop', () => same(io, ioClose, async (_r, which) => {
    const port = which === 'proxy' ? proxyPort : directPort;
    const k = `${tag}io:counter`;
    const setup = io(port);
    await setup.del(k);
    await setup.quit();
    const worker = async () => {
      const c = io(port);
      try {
        for (let i = 0; i < 20; i++) {
          for (;;) {
            await c.watch(k);
            const v = Number(await c.get(k) || 0);
            const res = await c.multi().set(k, String(v + 1)).exec();
            if (res !== null) break;              // null: another worker wrote first, retry
          }
        }
      } finally {
        await c.quit();
      }
    };
    await Promise.all([worker(), worker(), worker()]);
    const c = io(port);
    const v = await c.get(k);
    await c.quit();
    return v;
  }));

  await test('ioredis scanStream', () => same(io, ioClose, async (r) => {
    const keys = Array.from({ length: 300 }, (_, i) => `io:scan${process.pid}:${i}`);
    await r.mset(...keys.flatMap((k) => [k, 'v']));
    const seen = [];
    await new Promise((resolve, reject) => {
      const s = r.scanStream({ match: `io:scan${process.pid}:*`, count: 40 });
      s.on('data', (batch) => seen.push(...batch));
      s.on('end', resolve);
      s.on('error', reject);
    });
    assert.strictEqual(seen.length, new Set(seen).size, 'a key twice');
    await r.del(...keys);
    return seen.sort();
  }));

  await test('ioredis BLPOP worker queue', () => same(io, ioClose, async (r, which) => {
    const port = which === 'proxy' ? proxyPort : directPort;
    const q = `io:queue${process.pid}`;
    await r.del(q);
    const jobs = Array.from({ length: 60 }, (_, i) => `job${i}`);
    const taken = [];
    const consumer = async () => {
      const c = io(port);
      try {
        for (;;) {
          const got = await c.blpop(q, 1);
          if (got === null) return;
          taken.push(got[1]);
        }
      } finally {
        c.disconnect();
      }
    };
    const consumers = [consumer(), consumer(), consumer()];
    for (const j of jobs) await r.rpush(q, j);
    await Promise.all(consumers);
    return taken.sort();
  }));

  await test('node-redis multi', () => same(nr, nrClose, async (c) => {
    const k = `${tag}nr:m`;
    await c.del(k);
    return c.multi().set(k, '1').incr(k).get(k).hSet(`${k}h`, 'f', 'v').hGetAll(`${k}h`)
      .del(`${k}h`).exec();
  }));

  await test('node-redis watch (isolated client)', () => same(nr, nrClose, async (c, which) => {
    const k = `${tag}nr:w`;
    await c.set(k, '10');
    const other = await nr(which === 'proxy' ? proxyPort : directPort);
    let aborted = false;
    try {
      await c.executeIsolated(async (iso) => {
        await iso.watch(k);
        const v = Number(await iso.get(k));
        await other.set(k, '99');                  // another client writes the watched key
        await iso.multi().set(k, String(v + 1)).exec();
      });
    } catch (e) {
      aborted = e.name === 'WatchError' || /watch/i.test(e.message);
    } finally {
      await other.quit();
    }
    const after = await c.executeIsolated(async (iso) => {
      await iso.watch(k);
      const v = Number(await iso.get(k));
      await iso.multi().set(k, String(v + 1)).exec();
      return c.get(k);
    });
    return [aborted, after];
  }));

  await test('node-redis scanIterator', () => same(nr, nrClose, async (c) => {
    const keys = Array.from({ length: 200 }, (_, i) => `nr:scan${process.pid}:${i}`);
    for (const k of keys) await c.set(k, 'v');
    const seen = [];
    for await (const k of c.scanIterator({ MATCH: `nr:scan${process.pid}:*`, COUNT: 25 })) seen.push(k);
    assert.strictEqual(seen.length, new Set(seen).size, 'a key twice');
    await c.del(keys);
    return seen.sort();
  }));

  await test('node-redis blPop queue', () => same(nr, nrClose, async (c) => {
    const q = `nr:queue${process.pid}`;
    await c.del(q);
    const waiting = c.blPop(commandOptions({ isolated: true }), q, 2);
    await new Promise((r) => setTimeout(r, 200));
    await c.rPush(q, 'hello');
    const got = await waiting;
    const empty = await c.blPop(commandOptions({ isolated: true }), q, 0.2);
    return [got, empty, await c.lLen(q)];
  }));

  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => { console.log(`FAIL main: ${e.stack}`); process.exit(1); });

// pubsub.js: ioredis or node-redis used as an application would — a pub/sub listener, then
// the same connection as an ordinary client, and a RESP3 client's replies — printing one
// JSON document of what it saw, so that test_pubsub_clients.py can require the proxy's to
// equal a redis-server's.
//
//   node pubsub.js ioredis|redis 2|3 PORT PREFIX
"use strict";

const [lib, respArg, portArg, prefix] = process.argv.slice(2);
const resp = Number(respArg);
const port = Number(portArg);
const channels = Array.from({ length: 12 }, (_, i) => `${prefix}:ch${i}`);
const deadline = setTimeout(() => { console.error("timed out"); process.exit(2); }, 20000);

function sortedObject(o) {
  return Object.fromEntries(Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

async function withIoredis() {
  const Redis = require("ioredis");
  const opts = { host: "127.0.0.1", port, lazyConnect: true, maxRetriesPerRequest: 1,
                 enableOfflineQueue: false, retryStrategy: () => null };
  if (resp === 3) opts.protocol = 3;
  const sub = new Redis(opts);
  const pub = new Redis(opts);
  await sub.connect();
  await pub.connect();
  const got = [];
  sub.on("message", (ch, msg) => got.push(["message", ch, msg]));
  sub.on("pmessage", (pat, ch, msg) => got.push(["pmessage", pat, ch, msg]));
  const count = await sub.subscribe(...channels);
  const pcount = await sub.psubscribe(`${prefix}:ch1*`);
  const receivers = [];
  for (const [i, ch] of channels.entries()) receivers.push(await pub.publish(ch, `m${i}`));
  for (let w = 0; got.length < channels.length + 3 && w < 1000; w++) await new Promise((r) => setTimeout(r, 10));
  if (got.length < channels.length + 3) throw new Error(`only ${got.length} messages: ${JSON.stringify(got)}`);
  await sub.unsubscribe(...channels);
  await sub.punsubscribe(`${prefix}:ch1*`);
  // an ordinary connection again
  await sub.set(`${prefix}:k`, "v");
  const after = await sub.get(`${prefix}:k`);
  await pub.hset(`${prefix}:h`, "a", "1", "b", "2");
  const out = {
    count, pcount, receivers, messages: got.map((m) => m.join(" ")).sort(), after,
    hgetall: sortedObject(await pub.hgetall(`${prefix}:h`)),
    mget: await pub.mget(`${prefix}:k`, `${prefix}:none`),
    exists: await pub.exists(`${prefix}:k`, `${prefix}:none`),
    numsub: await pub.pubsub("NUMSUB", channels[0]),
  };
  sub.disconnect();
  pub.disconnect();
  return out;
}

async function withNodeRedis() {
  const { createClient } = require("redis");
  const opts = { socket: { host: "127.0.0.1", port, reconnectStrategy: false } };
  if (resp === 3) opts.RESP = 3;
  const pub = createClient(opts);
  pub.on("error", (e) => { console.error("pub", e.message); });
  await pub.connect();
  const sub = pub.duplicate();
  sub.on("error", (e) => { console.error("sub", e.message); });
  await sub.connect();
  const got = [];
  await sub.subscribe(channels, (msg, ch) => got.push(`message ${ch} ${msg}`));
  await sub.pSubscribe(`${prefix}:ch1*`, (msg, ch) => got.push(`pmessage ${prefix}:ch1* ${ch} ${msg}`));
  const receivers = [];
  for (const [i, ch] of channels.entries()) receivers.push(await pub.publish(ch, `m${i}`));
  for (let w = 0; got.length < channels.length + 3 && w < 1000; w++) await new Promise((r) => setTimeout(r, 10));
  if (got.length < channels.length + 3) throw new Error(`only ${got.length} messages: ${JSON.stringify(got)}`);
  await sub.unsubscribe(channels);
  await sub.pUnsubscribe(`${prefix}:ch1*`);
  await sub.set(`${prefix}:k`, "v");
  const after = await sub.get(`${prefix}:k`);
  await pub.hSet(`${prefix}:h`, { a: "1", b: "2" });
  const hgetall = await pub.hGetAll(`${prefix}:h`);
  const out = {
    receivers, messages: got.sort(), after,
    hgetall: sortedObject(Object.fromEntries(hgetall instanceof Map ? hgetall : Object.entries(hgetall))),
    mget: await pub.mGet([`${prefix}:k`, `${prefix}:none`]),
    exists: await pub.exists([`${prefix}:k`, `${prefix}:none`]),
    numsub: sortedObject(await pub.pubSubNumSub(channels[0])),
    hello: resp === 3 ? (await pub.sendCommand(["HELLO", "3"])).proto : 2,
  };
  await sub.quit();
  await pub.quit();
  return out;
}

(lib === "ioredis" ? withIoredis() : withNodeRedis())
  .then((out) => {
    clearTimeout(deadline);
    process.stdout.write(JSON.stringify(out) + "\n");
    process.exit(0);
  })
  .catch((e) => {
    console.error(e && e.stack ? e.stack : String(e));
    process.exit(1);
  });

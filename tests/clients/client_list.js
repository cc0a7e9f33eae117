// CLIENT LIST / INFO through the proxy as node clients read them: node-redis 5's clientInfo()
// (the same fields as at a lone redis-server, none missing or NaN) and BullMQ's getWorkers()
// (3 workers on a queue with the default prefix: it reads their names from CLIENT LIST).
// Usage: node client_list.js <proxy port> <direct redis port>; prints "N passed, M failed".
'use strict';

const { createClient } = require('redis');
const { Queue, Worker } = require('bullmq');

const [proxyPort, directPort] = process.argv.slice(2).map(Number);
let passed = 0;
let failed = 0;

function check(ok, what) {
  if (ok) {
    passed++;
  } else {
    failed++;
    console.log('FAIL ' + what);
  }
}

// The fields a client library reads: present and, where numeric, numbers.
function missing(info) {
  return Object.keys(info).filter((k) => info[k] === undefined ||
                                         (typeof info[k] === 'number' && Number.isNaN(info[k])));
}

async function nodeRedisClientInfo() {
  const viaProxy = createClient({ socket: { host: '127.0.0.1', port: proxyPort } });
  const direct = createClient({ socket: { host: '127.0.0.1', port: directPort } });
  await viaProxy.connect();
  await direct.connect();
  try {
    await viaProxy.clientSetName('nr-info');
    const p = await viaProxy.clientInfo();
    const d = await direct.clientInfo();
    // Redis 7.0 has no lib-name / lib-ver (7.2): what the server gives, the proxy must give
    const want = Object.keys(d).filter((k) => !missing(d).includes(k));
    const lost = want.filter((k) => missing(p).includes(k));
    check(lost.length === 0, 'node-redis clientInfo() fields missing through the proxy: ' + lost);
    check(p.name === 'nr-info', 'clientInfo().name ' + p.name);
    check(p.cmd === 'client|info', 'clientInfo().cmd ' + p.cmd);
    check(p.user === 'default' && p.db === 0 && p.multi === -1 && p.redir === -1 && p.resp === 2,
          'clientInfo() user/db/multi/redir/resp ' + JSON.stringify(p));
    const id = await viaProxy.clientId();
    check(p.id === id, 'clientInfo().id ' + p.id + ' vs CLIENT ID ' + id);
  } finally {
    await viaProxy.quit();
    await direct.quit();
  }
}

async function bullmqGetWorkers() {
  const connection = { host: '127.0.0.1', port: proxyPort, maxRetriesPerRequest: null };
  const name = 'cl' + process.pid + Date.now();
  const queue = new Queue(name, { connection });
  const workers = [];
  try {
    for (let i = 0; i < 3; i++) {
      const w = new Worker(name, async () => 'done', { connection, name: 'w' + i });
      w.on('error', () => {});
      workers.push(w);
    }
    await Promise.all(workers.map((w) => w.waitUntilReady()));
    // a worker names its blocking connection when it starts fetching jobs: wait for the 3
    let got = [];
    for (let tries = 0; tries < 100; tries++) {
      got = await queue.getWorkers();
      if (got.length >= 3) {
        break;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    check(got.length === 3, 'BullMQ getWorkers() returned ' + got.length + ' workers, not 3');
    check(got.every((c) => c.id && c.addr && c.age !== undefined && c.idle !== undefined),
          'BullMQ workers carry id, addr, age, idle: ' + JSON.stringify(got[0]));
    const job = await queue.add('j', { n: 1 });
    let state = '';
    for (let tries = 0; tries < 100 && state !== 'completed'; tries++) {
      state = await job.getState();
      if (state !== 'completed') {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    check(state === 'completed', 'BullMQ job processed by a worker: ' + state);
  } finally {
    await Promise.all(workers.map((w) => w.close()));
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
  }
}

(async () => {
  for (const t of [nodeRedisClientInfo, bullmqGetWorkers]) {
    try {
      await t();
    } catch (e) {
      check(false, t.name + ': ' + (e && e.stack ? e.stack : e));
    }
  }
  console.log(passed + ' passed, ' + failed + ' failed');
  process.exit(failed ? 1 : 0);
})();

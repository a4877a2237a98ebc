#!/usr/bin/env node
// reflection_test.js - a Node client that knows Tessera only through server reflection.
//
// Starts tessera-master itself on an ephemeral port (--listen 127.0.0.1:0 --port-file), first
// with --insecure for a plaintext client, holds no .proto file, and with
// grpc-js-reflection-client: lists the services over reflection
// v1alpha (the library's default) and v1 (4th constructor argument), loads the descriptor of
// tessera.v1.Master, builds a client from it, calls ClusterStatus, and checks that a Heartbeat
// with id 0 gets INVALID_ARGUMENT naming "id". Then all of it again over mutual TLS
// (docs/security.md): certificates from `tessera certs init`, the master started with them,
// grpc-js's createSsl with shard 0's certificate (RegisterShard needs the shard role), and
// the client certificate refused RegisterShard with PERMISSION_DENIED; shard 0's certificate
// gets UNAVAILABLE naming addr, since no shard serves at the address it registers, which the
// master asks first under mutual TLS. Each master is stopped by pid at the end, on failure
// too. Exit 0 when every check passed, 1 otherwise.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawn, execFileSync } = require('child_process');

let grpc, GrpcReflection;
try {
  grpc = require('@grpc/grpc-js');
  ({ GrpcReflection } = require('grpc-js-reflection-client'));
} catch (e) {
  const why = e.code === 'MODULE_NOT_FOUND' ? 'node_modules is missing' : e.message;
  console.error(`tests/node: ${why}.\n` +
                'Run `make deps` (it runs `npm ci --prefix tests/node`) and try again.');
  process.exit(1);
}

const SRC = process.env.TESSERA_SRC || path.resolve(__dirname, '..', '..');
const BIN = process.env.TESSERA_BIN || path.join(SRC, 'build', 'bin');
const START_MS = 15000;   // for the master to write its port
const TOTAL_MS = 60000;   // for the whole test
const WANT_SERVICES = ['tessera.v1.Master', 'grpc.health.v1.Health',
                       'grpc.reflection.v1.ServerReflection',
                       'grpc.reflection.v1alpha.ServerReflection'];

let master = null;        // the child process
let masterExit = null;    // { code, signal } once it exited
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-node.'));
const clients = [];
let failures = 0;

function ok(what) { console.log(`ok - ${what}`); }
function fail(what) { failures++; console.log(`FAIL - ${what}`); }
function check(cond, what, detail) {
  if (cond) ok(what); else fail(detail === undefined ? what : `${what}: ${detail}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function startMaster(extra) {
  const exe = path.join(BIN, 'tessera-master');
  const portFile = path.join(tmp, 'master.port');
  try { fs.unlinkSync(portFile); } catch (e) { /* none yet */ }
  masterExit = null;
  const log = fs.openSync(path.join(tmp, 'master.log'), 'w');
  // detached: its own process group, so a last-resort SIGKILL can reach only what we started.
  master = spawn(exe, ['--listen', '127.0.0.1:0', '--port-file', portFile].concat(extra || []),
                 { stdio: ['ignore', log, log], detached: true });
  fs.closeSync(log);
  master.on('exit', (code, signal) => { masterExit = { code, signal }; });
  master.on('error', (e) => { masterExit = { code: -1, signal: null, error: e }; });
  return (async () => {
    const until = Date.now() + START_MS;
    while (Date.now() < until) {
      if (masterExit) throw new Error(`tessera-master (${exe}) exited at start: ` +
                                      `${JSON.stringify(masterExit)}\n${masterLog()}`);
      try {
        const port = parseInt(fs.readFileSync(portFile, 'utf8'), 10);
        if (port > 0) return `127.0.0.1:${port}`;
      } catch (e) { /* not written yet */ }
      await sleep(20);
    }
    throw new Error(`tessera-master did not write ${portFile} within ${START_MS} ms`);
  })();
}

function masterLog() {
  try {
    return fs.readFileSync(path.join(tmp, 'master.log'), 'utf8').slice(-2000);
  } catch (e) {
    return '';
  }
}

// SIGTERM by pid, up to 5 s to exit, then SIGKILL to its own group. Resolves to the exit status.
async function stopMaster() {
  for (const c of clients) { try { c.close(); } catch (e) { /* already closed */ } }
  if (!master || masterExit) return masterExit;
  try { process.kill(master.pid, 'SIGTERM'); } catch (e) { /* gone */ }
  const until = Date.now() + 5000;
  while (!masterExit && Date.now() < until) await sleep(20);
  if (!masterExit) {
    console.log(`tessera-master (pid ${master.pid}) ignored SIGTERM for 5 s: SIGKILL`);
    try { process.kill(-master.pid, 'SIGKILL'); } catch (e) { /* gone */ }
    while (!masterExit && Date.now() < until + 2000) await sleep(20);
  }
  return masterExit;
}

// A synchronous last resort for exits we did not plan (an exception, a signal).
process.on('exit', () => {
  if (master && !masterExit) {
    try { process.kill(-master.pid, 'SIGKILL'); } catch (e) { /* gone */ }
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(1));

function call(client, method, req) {
  return new Promise((resolve) => {
    client[method](req, { deadline: Date.now() + 5000 },
                   (err, resp) => resolve({ err, resp }));
  });
}

// How to reach the master: plaintext, or mutual TLS with certs/<stem>.pem.
function plaintext() {
  return { label: '', creds: () => grpc.credentials.createInsecure(), options: {} };
}
function mutualTls(certs) {
  const read = (f) => fs.readFileSync(path.join(certs, f));
  return {
    label: 'TLS ',
    creds: (stem) => grpc.credentials.createSsl(read('ca.pem'), read(`${stem}.key`),
                                                read(`${stem}.pem`)),
    // every Tessera server's certificate names server.tessera, whatever its address
    options: { 'grpc.ssl_target_name_override': 'server.tessera' },
  };
}

async function checkVersion(addr, version, shardAddr, how) {
  const label = how.label + (version || 'v1alpha (default)');
  const refl = version
    ? new GrpcReflection(addr, how.creds('client'), how.options, version)
    : new GrpcReflection(addr, how.creds('client'), how.options);
  if (refl.client) clients.push(refl.client);

  const services = await refl.listServices();
  const missing = WANT_SERVICES.filter((s) => !services.includes(s));
  check(missing.length === 0, `${label}: listServices names ${WANT_SERVICES.join(', ')}`,
        `missing ${missing} in ${JSON.stringify(services)}`);

  const methods = (await refl.listMethods('tessera.v1.Master')).map((m) => m.name);
  const wantMethods = ['RegisterShard', 'RegisterWorker', 'Heartbeat', 'Deregister',
                       'GetShardMap', 'ClusterStatus'];
  check(wantMethods.every((m) => methods.includes(m)), `${label}: listMethods tessera.v1.Master`,
        JSON.stringify(methods));

  const descriptor = await refl.getDescriptorBySymbol('tessera.v1.Master');
  // arrays: empty repeated fields come back as [] rather than missing.
  const pkg = descriptor.getPackageObject({ keepCase: true, enums: String, longs: String,
                                            arrays: true });
  const Master = pkg && pkg.tessera && pkg.tessera.v1 && pkg.tessera.v1.Master;
  check(typeof Master === 'function', `${label}: descriptor of tessera.v1.Master builds a client`);
  if (typeof Master !== 'function') return;
  // a shard's certificate: under mutual TLS only one may register a shard
  const client = new Master(addr, how.creds('shard-0'), how.options);
  clients.push(client);
  if (how.label) {
    const worker = new Master(addr, how.creds('client'), how.options);
    clients.push(worker);
    const denied = await call(worker, 'RegisterShard', { addr: shardAddr, instance: 'intruder' });
    check(denied.err && denied.err.code === grpc.status.PERMISSION_DENIED,
          `${label}: RegisterShard with the client (worker) certificate: PERMISSION_DENIED (7)`,
          denied.err ? `code ${denied.err.code}: ${denied.err.details}` : 'a reply');
  }

  // A shard registered through the dynamic client must show up in ClusterStatus. It sends a
  // secret of its own (required under mutual TLS: docs/security.md, "Member identity").
  // Under mutual TLS the master first asks the address, where nothing serves: UNAVAILABLE.
  const instance = `node-${version || 'v1alpha'}`;
  const reg = await call(client, 'RegisterShard', { addr: shardAddr, instance,
                                                    secret: crypto.randomBytes(32) });
  if (how.label)
    check(reg.err && reg.err.code === grpc.status.UNAVAILABLE && /^addr\b/.test(reg.err.details),
          `${label}: RegisterShard ${shardAddr} (no shard serves there): UNAVAILABLE, addr`,
          reg.err ? `code ${reg.err.code}: ${reg.err.details}` : JSON.stringify(reg.resp));
  else
    check(!reg.err && reg.resp.shard_id >= 1, `${label}: RegisterShard ${shardAddr} gets an id`,
          reg.err ? `${reg.err.code} ${reg.err.details}` : JSON.stringify(reg.resp));

  const cs = await call(client, 'ClusterStatus', {});
  check(!cs.err, `${label}: ClusterStatus answers`, cs.err && `${cs.err.code} ${cs.err.details}`);
  if (!cs.err) {
    check(Number(cs.resp.epoch) >= 1, `${label}: ClusterStatus epoch >= 1`, cs.resp.epoch);
    check(Array.isArray(cs.resp.shards), `${label}: ClusterStatus shards is an array`,
          typeof cs.resp.shards);
    const mine = (cs.resp.shards || []).find((s) => s.instance === instance);
    if (how.label)
      check(!mine, `${label}: ClusterStatus lists no shard refused`, JSON.stringify(mine));
    else
      check(mine && mine.addr === shardAddr && mine.state === 'MEMBER_STATE_ALIVE',
            `${label}: ClusterStatus lists the shard it registered, alive`,
            JSON.stringify(cs.resp.shards));
    check(Array.isArray(cs.resp.workers), `${label}: ClusterStatus workers is an array`);
    check(typeof cs.resp.version === 'string' && cs.resp.version.length > 0,
          `${label}: ClusterStatus version is set`, JSON.stringify(cs.resp.version));
  }

  const hb = await call(client, 'Heartbeat', { kind: 'MEMBER_KIND_SHARD', id: 0 });
  check(hb.err && hb.err.code === grpc.status.INVALID_ARGUMENT,
        `${label}: Heartbeat id=0 gets INVALID_ARGUMENT (3)`,
        hb.err ? `code ${hb.err.code}: ${hb.err.details}` : `a reply: ${JSON.stringify(hb.resp)}`);
  check(hb.err && /^id\b/.test(hb.err.details), `${label}: its details name "id" first`,
        hb.err && JSON.stringify(hb.err.details));
}

async function main() {
  const timer = setTimeout(() => {
    console.log(`FAIL - the test did not finish within ${TOTAL_MS} ms`);
    process.exit(1);
  }, TOTAL_MS);
  const t0 = Date.now();
  let rc = 1;
  try {
    // First a plaintext master: what reflection gives a client that speaks no TLS, and a
    // registration no certificate checks. Plaintext is no longer a service's default, so it
    // is asked for (--insecure); the default, mutual TLS, follows.
    let addr = await startMaster(['--insecure']);
    ok(`tessera-master --insecure (pid ${master.pid}) listens at ${addr}`);
    await checkVersion(addr, undefined, '127.0.0.1:9', plaintext());
    await checkVersion(addr, 'v1', '127.0.0.1:10', plaintext());
    const st = await stopMaster();
    check(st && st.code === 0, 'the plaintext master exits 0 on SIGTERM', JSON.stringify(st));
    const certs = path.join(tmp, 'certs');
    execFileSync(path.join(BIN, 'tessera'), ['certs', 'init', certs], { stdio: 'ignore' });
    addr = await startMaster(['--tls-cert', path.join(certs, 'master.pem'),
                              '--tls-key', path.join(certs, 'master.key'),
                              '--tls-ca', path.join(certs, 'ca.pem')]);
    ok(`tessera-master (pid ${master.pid}) listens at ${addr} with mutual TLS`);
    await checkVersion(addr, undefined, '127.0.0.1:9', mutualTls(certs));
    await checkVersion(addr, 'v1', '127.0.0.1:10', mutualTls(certs));
    rc = failures ? 1 : 0;
  } catch (e) {
    fail(`unexpected error: ${e && e.stack ? e.stack : e}`);
    const log = masterLog();
    if (log) console.log(`---- master.log ----\n${log}`);
  } finally {
    const st = await stopMaster();
    if (st && st.code !== 0 && rc === 0) {
      fail(`tessera-master exited with ${JSON.stringify(st)} after SIGTERM`);
      rc = 1;
    }
    clearTimeout(timer);
  }
  console.log(`${rc === 0 ? 'OK' : 'FAILED'}: ${failures} failure(s) in ${Date.now() - t0} ms`);
  process.exit(rc);
}

main();

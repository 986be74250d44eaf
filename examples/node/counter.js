'use strict';
// Increments a shared counter under a sqllock lock, or holds, waits for or
// fences with one; the Node counterpart of examples/python/counter.py.
//
//   node counter.js DSN SCHEMA NAME increment COUNT
//       add 1 to SCHEMA.counter COUNT times, each in a transaction fenced
//       by the lock: with the lock, no increment is lost
//   node counter.js DSN SCHEMA NAME hold TTL
//       take the lock, print its token, keep it (renewed) until a line
//       "release" on standard input, then release it and print "released"
//   node counter.js DSN SCHEMA NAME wait TTL
//       acquire the lock, printing "waiting" when the wait begins, then
//       "TOKEN WAKEUPS" once it is held (WAKEUPS: the waits a release's
//       notification cut short), and release it
//   node counter.js DSN SCHEMA NAME stale TTL
//       take the lock, print its token and stop renewing it (a holder that
//       paused); at a line on standard input, try to add 1000 to the
//       counter in a transaction guarded by the old token, and print
//       "refused" (sqllock_guard refused it) or "written"
//
// DSN is a PostgreSQL URL, or mysql://USER[:PASSWORD]@HOST[:PORT]/DB for
// MySQL/MariaDB, where SCHEMA is the database.

const readline = require('node:readline');
const { connect, LockLost } = require('./sqllock');

// lines returns a function answering the next line of standard input (null
// at its end).
function lines() {
  const rl = readline.createInterface({ input: process.stdin });
  const queue = [];
  const waiting = [];
  let ended = false;
  rl.on('line', (l) => (waiting.length ? waiting.shift()(l) : queue.push(l)));
  rl.on('close', () => {
    ended = true;
    while (waiting.length) waiting.shift()(null);
  });
  return () => {
    if (queue.length) return Promise.resolve(queue.shift());
    if (ended) return Promise.resolve(null);
    return new Promise((resolve) => waiting.push(resolve));
  };
}

// inTransaction runs f in a transaction on client.conn: committed if f
// returns, rolled back if it throws.
async function inTransaction(client, f) {
  const conn = client.conn;
  await conn.query('BEGIN');
  try {
    await f();
    await conn.query('COMMIT');
  } catch (err) {
    await conn.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

// add reads the counter and writes it back `by` higher.
async function add(client, table, by) {
  const a = client.adapter;
  const [[n]] = await a.query(client.conn, `SELECT n FROM ${table} WHERE id = 1`, []);
  await a.query(client.conn, `UPDATE ${table} SET n = ${a.param(1)} WHERE id = 1`, [Number(n) + by]);
}

async function main([dsn, schema, name, mode, arg]) {
  const client = await connect(dsn, schema);
  const table = client.adapter.table('counter');
  const ttl = Number(arg);
  try {
    switch (mode) {
      case 'increment':
        for (let i = 0; i < Number(arg); i++) {
          const lock = await client.acquire(name, 30);
          try {
            await inTransaction(client, async () => {
              await lock.guard();
              await add(client, table, 1);
            });
          } finally {
            await lock.release();
          }
        }
        break;
      case 'hold': {
        const next = lines();
        const lock = await client.acquire(name, ttl);
        console.log(lock.token);
        // Renewed every TTL/3 meanwhile; a lost lease ends the process.
        const watch = setInterval(() => {
          if (!lock.held()) {
            console.error('counter.js: lost the lock');
            process.exit(1);
          }
        }, 100);
        for (let l = await next(); l !== 'release'; l = await next()) {
          if (l === null) await new Promise(() => {}); // no more input: hold until killed
        }
        clearInterval(watch);
        if (!(await lock.release())) throw new Error('release: no hold given back');
        console.log('released');
        break;
      }
      case 'wait': {
        const lock = await client.acquire(name, ttl, { onWait: () => console.log('waiting') });
        console.log(`${lock.token} ${client.wakeups}`);
        await lock.release();
        break;
      }
      case 'stale': {
        const next = lines();
        const lock = await client.acquire(name, ttl);
        lock.stop(); // paused: no more renewals
        console.log(lock.token);
        await next();
        try {
          // Straight to sqllock_guard, as a holder that misjudged its
          // trust window would: the database must refuse the token.
          await inTransaction(client, async () => {
            await client.adapter.guard(client.conn, name, client.owner, lock.token);
            await add(client, table, 1000);
          });
          console.log('written');
        } catch (err) {
          if (!(err instanceof LockLost)) throw err;
          console.log('refused');
        }
        break;
      }
      default:
        throw new Error(`unknown mode ${JSON.stringify(mode)}`);
    }
  } finally {
    await client.close();
  }
}

main(process.argv.slice(2)).catch((err) => {
  console.error('counter.js:', err);
  process.exit(1);
});

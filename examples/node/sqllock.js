'use strict';
// A Node client of sqllock's lock protocol (docs/protocol.md). It takes the
// same locks as Go's sqllock.Table, the sqllock command and the other SQL
// clients, on one name, with the same fencing tokens:
//
//   - on PostgreSQL through the functions of migration 23, with the npm
//     package pg; a waiter LISTENs and is woken by the release's NOTIFY;
//   - on MySQL/MariaDB through the stored procedures of migration 24, with
//     the npm package mysql2; MySQL has no NOTIFY, so a waiter polls with a
//     capped, jittered backoff, never longer than the holder's lease has
//     left.
//
// One Client per process (or per holder): its owner is unique and never
// reused. Client.conn is the caller's connection, for its own (fenced)
// transactions; the client renews its leases on a connection of its own.
//
//   const { connect } = require('./sqllock');
//   const client = await connect('postgres://app@db/app', 'sqllock');
//   const lock = await client.acquire('report', 30);
//   await client.conn.query('BEGIN');
//   await lock.guard();            // throws LockLost unless the lease is current
//   ...                            // the writes the lock protects
//   await client.conn.query('COMMIT');
//   await lock.release();
//   await client.close();

const crypto = require('node:crypto');
const os = require('node:os');
const { setTimeout: sleep } = require('node:timers/promises');

// The SQLSTATE of sqllock_guard when the lease is not current.
const NOT_CURRENT = 'SQLK2';

// LockLost: the lease ended (it was not renewed in time, or was taken
// over), or sqllock_guard refused its token.
class LockLost extends Error {
  constructor(name, cause) {
    super(`sqllock: the lease on ${JSON.stringify(name)} is not current`, cause ? { cause } : undefined);
    this.name = 'LockLost';
    this.lockName = name;
  }
}

// quoteIdent quotes a PostgreSQL identifier.
function quoteIdent(s) {
  return '"' + String(s).replace(/"/g, '""') + '"';
}

// cutBytes is s cut to at most n bytes of UTF-8, on a character boundary.
function cutBytes(s, n) {
  let out = '';
  let size = 0;
  for (const ch of s) {
    size += Buffer.byteLength(ch);
    if (size > n) break;
    out += ch;
  }
  return out;
}

// The PostgreSQL adapter: the functions of migration 23 in `schema`.
class PgAdapter {
  constructor(dsn, schema) {
    this.pg = require('pg');
    this.dsn = dsn;
    this.schema = schema;
    this.prefix = quoteIdent(schema) + '.';
    this.canWake = true;
  }

  async connect() {
    const conn = new this.pg.Client({ connectionString: this.dsn });
    // A lost connection fails the queries on it; the event alone would
    // end the process.
    conn.on('error', () => {});
    await conn.connect();
    return conn;
  }

  async value(conn, text, args) {
    const res = await conn.query({ text, values: args, rowMode: 'array' });
    return res.rows[0][0];
  }

  // TTLs are seconds, sent as float8 and turned into intervals; tokens
  // are bigints, which pg returns as strings.
  tryAcquire(conn, name, owner, ttl) {
    return this.value(conn, `SELECT ${this.prefix}sqllock_try_acquire($1, $2, $3::float8 * interval '1 second')`, [name, owner, ttl]);
  }

  renew(conn, name, owner, token, ttl) {
    return this.value(conn, `SELECT ${this.prefix}sqllock_renew($1, $2, $3, $4::float8 * interval '1 second')`, [name, owner, token, ttl]);
  }

  release(conn, name, owner, token) {
    return this.value(conn, `SELECT ${this.prefix}sqllock_release($1, $2, $3)`, [name, owner, token]);
  }

  // remaining is the seconds the holder's lease has left, or null.
  remaining(conn, name) {
    return this.value(conn, `SELECT extract(epoch FROM ${this.prefix}sqllock_remaining($1))::float8`, [name]);
  }

  async guard(conn, name, owner, token) {
    try {
      await conn.query(`SELECT ${this.prefix}sqllock_guard($1, $2, $3)`, [name, owner, token]);
    } catch (err) {
      if (err.code === NOT_CURRENT) throw new LockLost(name, err);
      throw err;
    }
  }

  // listen opens the connection a waiter is woken on, LISTENing on both
  // channels a release announces names on, and calls notify(payload) for
  // each notification.
  async listen(notify) {
    const conn = await this.connect();
    conn.on('notification', (msg) => notify(msg.payload));
    for (const channel of ['sqllock', cutBytes('sqllock:' + this.schema, 63)]) {
      await conn.query('LISTEN ' + quoteIdent(channel));
    }
    return conn;
  }

  async query(conn, text, args) {
    const res = await conn.query({ text, values: args, rowMode: 'array' });
    return res.rows;
  }

  param(n) {
    return '$' + n;
  }

  table(name) {
    return quoteIdent(this.schema) + '.' + quoteIdent(name);
  }
}

// The MySQL/MariaDB adapter: the procedures of migration 24 in
// `database` (by default the URL's).
class MysqlAdapter {
  constructor(dsn, database) {
    this.mysql = require('mysql2/promise');
    const u = new URL(dsn);
    this.database = database || decodeURIComponent(u.pathname.replace(/^\//, ''));
    this.options = {
      host: u.hostname || '127.0.0.1',
      port: Number(u.port || 3306),
      user: decodeURIComponent(u.username || 'root'),
      password: decodeURIComponent(u.password || ''),
      database: this.database,
      // Tokens (microseconds since the epoch on MySQL) stay exact strings.
      supportBigNumbers: true,
      bigNumberStrings: true,
    };
    this.prefix = '`' + this.database.replace(/`/g, '``') + '`.';
    this.canWake = false;
  }

  async connect() {
    const conn = await this.mysql.createConnection(this.options);
    conn.on('error', () => {}); // as on PostgreSQL: the queries fail
    return conn;
  }

  // call CALLs a procedure and returns the first column of its row, or
  // null for one that answers nothing.
  async call(conn, procedure, args) {
    const marks = args.map(() => '?').join(', ');
    const [res] = await conn.query({ sql: `CALL ${this.prefix}${procedure}(${marks})`, rowsAsArray: true }, args);
    // A CALL answers its result sets, then the call's status.
    if (Array.isArray(res) && Array.isArray(res[0]) && res[0].length > 0) return res[0][0][0];
    return null;
  }

  // TTLs are sent as microseconds.
  tryAcquire(conn, name, owner, ttl) {
    return this.call(conn, 'sqllock_try_acquire', [name, owner, Math.round(ttl * 1e6)]);
  }

  async renew(conn, name, owner, token, ttl) {
    return Number(await this.call(conn, 'sqllock_renew', [name, owner, token, Math.round(ttl * 1e6)])) === 1;
  }

  async release(conn, name, owner, token) {
    return Number(await this.call(conn, 'sqllock_release', [name, owner, token])) === 1;
  }

  async remaining(conn, name) {
    const us = await this.call(conn, 'sqllock_remaining', [name]);
    return us === null ? null : Number(us) / 1e6;
  }

  async guard(conn, name, owner, token) {
    try {
      await this.call(conn, 'sqllock_guard', [name, owner, token]);
    } catch (err) {
      // MySQL does not abort the transaction: the caller rolls it back.
      if (err.sqlState === NOT_CURRENT) throw new LockLost(name, err);
      throw err;
    }
  }

  async query(conn, sql, args) {
    const [rows] = await conn.query({ sql, rowsAsArray: true }, args);
    return rows;
  }

  param() {
    return '?';
  }

  table(name) {
    return this.prefix + '`' + name.replace(/`/g, '``') + '`';
  }
}

// The waiter's backoff on MySQL: it doubles from 5 ms up to maxBackoff,
// each sleep drawn from its upper half.
const MIN_BACKOFF = 0.005;

class Client {
  constructor(adapter, options = {}) {
    this.adapter = adapter;
    this.maxBackoff = options.maxBackoff ?? 0.5;
    // Owners are unique per client and never reused.
    this.owner = `${os.hostname()}/${process.pid}/${crypto.randomBytes(6).toString('hex')}`;
    // Wake-ups: per name, how many notifications arrived, and the waiters
    // to resolve on the next one.
    this.announced = new Map();
    this.waiting = new Map();
    // wakeups counts the waits a notification ended before their time (or
    // kept from beginning).
    this.wakeups = 0;
    this.locks = new Set();
  }

  async open() {
    this.conn = await this.adapter.connect();
    this.renewConn = await this.adapter.connect();
    if (this.adapter.canWake) this.listener = await this.adapter.listen((name) => this.announce(name));
  }

  announce(name) {
    this.announced.set(name, (this.announced.get(name) || 0) + 1);
    const wake = this.waiting.get(name);
    if (wake) {
      this.waiting.delete(name);
      for (const f of wake) f();
    }
  }

  // tryAcquire returns the Lock on name for ttl seconds, or null when
  // another owner holds it.
  async tryAcquire(name, ttl) {
    const start = performance.now();
    const token = await this.adapter.tryAcquire(this.conn, name, this.owner, ttl);
    return token === null ? null : new Lock(this, name, String(token), ttl, start);
  }

  // acquire waits for the lock on name and returns it. options.signal
  // (an AbortSignal) ends the wait; options.onWait is called once, when
  // the lock was found held and the wait begins.
  async acquire(name, ttl, options = {}) {
    let backoff = MIN_BACKOFF;
    let told = false;
    for (;;) {
      options.signal?.throwIfAborted();
      // Notifications for name from here on end the wait below, even one
      // that arrives before the wait begins.
      const seen = this.announced.get(name) || 0;
      const lock = await this.tryAcquire(name, ttl);
      if (lock !== null) return lock;
      // sqllock_remaining marks the row as waited for, so that its
      // release announces the name.
      const left = await this.adapter.remaining(this.conn, name);
      if (left === null || left <= 0) continue;
      if (!told && options.onWait) {
        told = true;
        options.onWait();
      }
      if (this.adapter.canWake) {
        await this.wait(name, seen, left, options.signal);
      } else {
        await sleep(1000 * Math.min(left, backoff * (0.5 + Math.random() / 2)), undefined, { signal: options.signal });
        backoff = Math.min(2 * backoff, this.maxBackoff);
      }
    }
  }

  // wait sleeps until a release announces name (after `seen`
  // announcements), or for timeout seconds.
  wait(name, seen, timeout, signal) {
    if ((this.announced.get(name) || 0) !== seen) {
      this.wakeups++; // announced before the wait began
      return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
      let timer;
      const done = (woken) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        const list = this.waiting.get(name);
        if (list) {
          const i = list.indexOf(wake);
          if (i >= 0) list.splice(i, 1);
          if (list.length === 0) this.waiting.delete(name);
        }
        if (woken) this.wakeups++;
      };
      const wake = () => {
        done(true);
        resolve();
      };
      const aborted = () => {
        done(false);
        reject(signal.reason);
      };
      timer = setTimeout(() => {
        done(false);
        resolve();
      }, 1000 * timeout);
      signal?.addEventListener('abort', aborted, { once: true });
      if (!this.waiting.has(name)) this.waiting.set(name, []);
      this.waiting.get(name).push(wake);
    });
  }

  // close stops the renewals of the client's locks (without releasing
  // them: they expire) and closes its connections.
  async close() {
    for (const lock of this.locks) lock.stop();
    for (const conn of [this.listener, this.renewConn, this.conn]) {
      if (conn) await conn.end().catch(() => {});
    }
  }
}

// A Lock is a held lease, renewed every TTL/3 until released.
class Lock {
  constructor(client, name, token, ttl, start) {
    this.client = client;
    this.name = name;
    // token is the fencing token, a decimal string (a bigint in SQL).
    this.token = token;
    this.ttl = ttl;
    // The trust window ends at the client's clock before the call that
    // granted (or last renewed) the lease, plus the TTL.
    this.trustedUntil = start + 1000 * ttl;
    this.lost = false;
    this.renewing = null;
    client.locks.add(this);
    this.schedule();
  }

  schedule() {
    this.timer = setTimeout(() => {
      this.renewing = this.renew().finally(() => {
        this.renewing = null;
      });
    }, (1000 * this.ttl) / 3);
  }

  async renew() {
    const start = performance.now();
    let ok;
    try {
      ok = await this.client.adapter.renew(this.client.renewConn, this.name, this.client.owner, this.token, this.ttl);
    } catch (err) {
      // A failed renewal is tried again at the next tick while the trust
      // window lasts.
      if (this.timer === null) return;
      this.schedule();
      return;
    }
    if (this.timer === null) return; // stopped meanwhile
    if (!ok) {
      this.lost = true;
      this.stop();
      return;
    }
    this.trustedUntil = start + 1000 * this.ttl;
    this.schedule();
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
    this.client.locks.delete(this);
  }

  // held tells whether the lease may still be trusted: not lost, and the
  // trust window not over.
  held() {
    return !this.lost && performance.now() < this.trustedUntil;
  }

  // guard fences the transaction open on conn (by default client.conn):
  // it throws LockLost unless the lease is current, and otherwise keeps
  // a takeover from committing before the transaction ends.
  async guard(conn = this.client.conn) {
    if (!this.held()) throw new LockLost(this.name);
    await this.client.adapter.guard(conn, this.name, this.client.owner, this.token);
  }

  // release stops the renewals and gives the lock back; it returns
  // whether a hold was given back (false when the lease was lost).
  async release() {
    this.stop();
    if (this.renewing) await this.renewing;
    return this.client.adapter.release(this.client.conn, this.name, this.client.owner, this.token);
  }
}

// connect returns an open Client: on PostgreSQL (a postgres:// or
// postgresql:// URL) for the sqllock functions in `schema`; on
// MySQL/MariaDB (a mysql:// URL) for the procedures in database `schema`
// (by default the URL's).
async function connect(dsn, schema, options) {
  const adapter = /^mysql:/.test(dsn) ? new MysqlAdapter(dsn, schema) : new PgAdapter(dsn, schema);
  const client = new Client(adapter, options);
  try {
    await client.open();
  } catch (err) {
    await client.close();
    throw err;
  }
  return client;
}

module.exports = { connect, Client, Lock, LockLost, PgAdapter, MysqlAdapter };

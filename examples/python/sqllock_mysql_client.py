"""A client of sqllock's lock protocol (docs/protocol.md) on MySQL/MariaDB,
with Debian's MySQLdb (python3-mysqldb).

It takes the same locks as Go's sqllock.Table on MySQL/MariaDB, through the
stored procedures of migration 24. MySQL has no NOTIFY: a waiter polls,
with a capped jittered backoff, never longer than the holder's lease has
left.
"""

import os
import random
import secrets
import socket
import threading
import time
from urllib.parse import unquote, urlsplit

import MySQLdb

# SIGNAL's error number: the procedures' SQLSTATEs (22004, 22023, SQLK2)
# come with it; MySQLdb reports the number and the message, not the
# SQLSTATE.
ER_SIGNAL_EXCEPTION = 1644


class LockLost(Exception):
    """The lease ended: it was not renewed in time, or was taken over."""


class Client:
    """Locks of the sqllock database of `dsn`, a URL
    mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE."""

    def __init__(self, dsn, database=None):
        u = urlsplit(dsn)
        self.args = dict(host=u.hostname or "127.0.0.1", port=u.port or 3306,
                         user=unquote(u.username or "root"), passwd=unquote(u.password or ""),
                         db=database or u.path.lstrip("/"))
        self.database = self.args["db"]
        self.conn = self._connect()
        # Owners are unique per process and never reused.
        self.owner = "%s/%d/%s" % (socket.gethostname(), os.getpid(), secrets.token_hex(4))

    def _connect(self):
        return MySQLdb.connect(autocommit=True, **self.args)

    def call(self, conn, procedure, *args):
        """CALLs the protocol's procedure on conn and returns the first
        column of its row (None for a procedure that answers nothing)."""
        query = "CALL `%s`.%s(%s)" % (self.database.replace("`", "``"), procedure,
                                      ", ".join(["%s"] * len(args)))
        c = conn.cursor()
        try:
            c.execute(query, args)
            row = c.fetchone() if c.description else None
            while c.nextset():
                pass
            return None if row is None else row[0]
        finally:
            c.close()

    def try_acquire(self, name, ttl):
        """Returns the Lock on name, or None when another owner holds it."""
        token = self.call(self.conn, "sqllock_try_acquire", name, self.owner, _micros(ttl))
        return None if token is None else Lock(self, name, token, ttl)

    def acquire(self, name, ttl, max_backoff=0.5):
        """Waits for the lock on name and returns it."""
        backoff = 0.005
        while True:
            lock = self.try_acquire(name, ttl)
            if lock is not None:
                return lock
            left = self.call(self.conn, "sqllock_remaining", name)
            if left is None or left <= 0:
                continue
            time.sleep(min(left / 1e6, random.uniform(backoff / 2, backoff)))
            backoff = min(2 * backoff, max_backoff)


class Lock:
    """A held lease, renewed every TTL/3 on a connection of its own."""

    def __init__(self, client, name, token, ttl):
        self.client, self.name, self.token, self.ttl = client, name, token, ttl
        self._stop = threading.Event()
        self.lost = threading.Event()
        self._renewer = threading.Thread(target=self._renew, daemon=True)
        self._renewer.start()

    def _renew(self):
        conn = None
        try:
            conn = self.client._connect()
            while not self._stop.wait(self.ttl / 3):
                if not self.client.call(conn, "sqllock_renew", self.name, self.client.owner,
                                        self.token, _micros(self.ttl)):
                    self.lost.set()
                    return
        except MySQLdb.Error:
            self.lost.set()
        finally:
            if conn is not None:
                conn.close()

    def guard(self, cursor):
        """Fences the transaction of cursor: it fails unless the lease is
        current (the caller rolls the transaction back)."""
        if self.lost.is_set():
            raise LockLost(self.name)
        try:
            cursor.execute("CALL `%s`.sqllock_guard(%%s, %%s, %%s)" % self.client.database.replace("`", "``"),
                           (self.name, self.client.owner, self.token))
            while cursor.nextset():
                pass
        except MySQLdb.OperationalError as e:
            if e.args and e.args[0] == ER_SIGNAL_EXCEPTION and "is not current" in str(e.args[1]):
                raise LockLost(self.name) from e
            raise

    def release(self):
        """Stops the renewals and gives the lock back."""
        self._stop.set()
        self._renewer.join()
        return bool(self.client.call(self.client.conn, "sqllock_release", self.name,
                                     self.client.owner, self.token))


def _micros(seconds):
    return int(seconds * 1e6)

"""A client of sqllock's lock protocol (docs/protocol.md) with psycopg2.

It takes the same locks as Go's sqllock.Table on PostgreSQL, through the
functions of migration 23.
"""

import os
import secrets
import select
import socket
import threading
import time

import psycopg2
from psycopg2 import sql


class LockLost(Exception):
    """The lease ended: it was not renewed in time, or was taken over."""


class Client:
    """Locks of the sqllock schema `schema` on the database at `dsn`."""

    def __init__(self, dsn, schema):
        self.dsn, self.schema = dsn, schema
        self.conn = self._connect()
        # Owners are unique per process and never reused.
        self.owner = "%s/%d/%s" % (socket.gethostname(), os.getpid(), secrets.token_hex(4))
        # Releases announce names on both channels (docs/protocol.md).
        self.listener = self._connect()
        with self.listener.cursor() as c:
            for channel in ("sqllock", ("sqllock:" + schema)[:63]):
                c.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))

    def _connect(self):
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True
        return conn

    def call(self, conn, function, *args):
        """Runs the protocol's function on conn and returns its result."""
        query = sql.SQL("SELECT {}.{}({})").format(
            sql.Identifier(self.schema), sql.Identifier(function),
            sql.SQL(", ").join(sql.Placeholder() * len(args)))
        with conn.cursor() as c:
            c.execute(query, args)
            return c.fetchone()[0]

    def try_acquire(self, name, ttl):
        """Returns the Lock on name, or None when another owner holds it."""
        token = self.call(self.conn, "sqllock_try_acquire", name, self.owner, _interval(ttl))
        return None if token is None else Lock(self, name, token, ttl)

    def acquire(self, name, ttl):
        """Waits for the lock on name and returns it."""
        while True:
            lock = self.try_acquire(name, ttl)
            if lock is not None:
                return lock
            left = self.call(self.conn, "sqllock_remaining", name)
            if left is None or left.total_seconds() <= 0:
                continue
            self._wait(name, left.total_seconds())

    def _wait(self, name, timeout):
        """Sleeps until a release announces name, or for timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self.listener.poll()
            while self.listener.notifies:
                if self.listener.notifies.pop().payload == name:
                    return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            select.select([self.listener], [], [], left)


class Lock:
    """A held lease, renewed every TTL/3 on a connection of its own."""

    def __init__(self, client, name, token, ttl):
        self.client, self.name, self.token, self.ttl = client, name, token, ttl
        self._stop = threading.Event()
        self.lost = threading.Event()
        self._renewer = threading.Thread(target=self._renew, daemon=True)
        self._renewer.start()

    def _renew(self):
        conn = self.client._connect()
        try:
            while not self._stop.wait(self.ttl / 3):
                if not self.client.call(conn, "sqllock_renew", self.name, self.client.owner,
                                        self.token, _interval(self.ttl)):
                    self.lost.set()
                    return
        except psycopg2.Error:
            self.lost.set()
        finally:
            conn.close()

    def guard(self, cursor):
        """Fences the transaction of cursor: it fails unless the lease is current."""
        if self.lost.is_set():
            raise LockLost(self.name)
        cursor.execute(sql.SQL("SELECT {}.sqllock_guard(%s, %s, %s)").format(
            sql.Identifier(self.client.schema)), (self.name, self.client.owner, self.token))

    def release(self):
        """Stops the renewals and gives the lock back."""
        self._stop.set()
        self._renewer.join()
        return self.client.call(self.client.conn, "sqllock_release", self.name,
                                self.client.owner, self.token)


def _interval(seconds):
    return "%f seconds" % seconds

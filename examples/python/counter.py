"""Increments a shared counter under a sqllock lock, or holds a lock.

    counter.py DSN SCHEMA NAME increment COUNT   add 1 to SCHEMA.counter COUNT times
    counter.py DSN SCHEMA NAME hold TTL          take the lock, print its token, sleep

Each increment reads the counter and writes it back one higher, in a
transaction fenced by the lock: with the lock, no increment is lost.
"""

import sys
import time

from psycopg2 import sql

from sqllock_client import Client


def main(dsn, schema, name, mode, arg):
    client = Client(dsn, schema)
    if mode == "hold":
        lock = client.acquire(name, float(arg))
        print(lock.token, flush=True)
        while not lock.lost.is_set():
            time.sleep(1)
        sys.exit("lost the lock")
    table = sql.SQL("{}.counter").format(sql.Identifier(schema))
    for _ in range(int(arg)):
        lock = client.acquire(name, 30)
        with client.conn.cursor() as c:
            c.execute("BEGIN")
            lock.guard(c)
            c.execute(sql.SQL("SELECT n FROM {} WHERE id = 1").format(table))
            n = c.fetchone()[0]
            c.execute(sql.SQL("UPDATE {} SET n = %s WHERE id = 1").format(table), (n + 1,))
            c.execute("COMMIT")
        lock.release()


if __name__ == "__main__":
    main(*sys.argv[1:6])

"""Increments a shared counter under a sqllock lock, or holds a lock.

    counter.py DSN SCHEMA NAME increment COUNT   add 1 to SCHEMA.counter COUNT times
    counter.py DSN SCHEMA NAME hold TTL          take the lock, print its token, sleep

DSN is a PostgreSQL URL (psycopg2, sqllock_client), or mysql://... for
MySQL/MariaDB (MySQLdb, sqllock_mysql_client), where SCHEMA is the
database. Each increment reads the counter and writes it back one higher,
in a transaction fenced by the lock: with the lock, no increment is lost.
"""

import sys
import time


def main(dsn, schema, name, mode, arg):
    if dsn.startswith("mysql://"):
        from sqllock_mysql_client import Client

        client = Client(dsn, schema)
        quoted = "`%s`.counter" % schema.replace("`", "``")
        select = "SELECT n FROM %s WHERE id = 1" % quoted
        update = "UPDATE %s SET n = %%s WHERE id = 1" % quoted
    else:
        from psycopg2 import sql

        from sqllock_client import Client

        client = Client(dsn, schema)
        table = sql.SQL("{}.counter").format(sql.Identifier(schema))
        select = sql.SQL("SELECT n FROM {} WHERE id = 1").format(table)
        update = sql.SQL("UPDATE {} SET n = %s WHERE id = 1").format(table)
    if mode == "hold":
        lock = client.acquire(name, float(arg))
        print(lock.token, flush=True)
        while not lock.lost.is_set():
            time.sleep(1)
        sys.exit("lost the lock")
    for _ in range(int(arg)):
        lock = client.acquire(name, 30)
        c = client.conn.cursor()
        try:
            c.execute("BEGIN")
            lock.guard(c)
            c.execute(select)
            n = c.fetchone()[0]
            c.execute(update, (n + 1,))
            c.execute("COMMIT")
        finally:
            c.close()
        lock.release()


if __name__ == "__main__":
    main(*sys.argv[1:6])

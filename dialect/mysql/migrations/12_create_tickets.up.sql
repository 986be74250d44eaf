-- sqllock FIFO tickets (Options.Fair), MySQL 8 / MariaDB 10.6+.
-- A fair waiter takes a ticket: a row whose id orders it in its lock's
-- queue. The lock is granted only to the oldest live ticket (or, with no
-- live ticket, to anyone), in a transaction that deletes the ticket. A
-- ticket lives while its waiter renews it: a crashed waiter's ticket
-- expires and is skipped.
CREATE TABLE IF NOT EXISTS sqllock_tickets (
    id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name       VARBINARY(255)  NOT NULL,
    owner      VARBINARY(255)  NOT NULL,
    expires_at DATETIME(6)     NOT NULL,
    KEY sqllock_tickets_name_idx (name, id),
    KEY sqllock_tickets_expires_at_idx (expires_at)
) ENGINE = InnoDB;

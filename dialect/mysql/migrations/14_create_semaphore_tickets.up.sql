-- sqllock FIFO tickets of semaphores (Options.Fair on a Semaphore), MySQL 8 / MariaDB 10.6+.
-- A fair waiter for a semaphore takes a ticket: a row whose id orders it in
-- its semaphore's queue. A name's permits go to its live tickets in ticket
-- order; the grant deletes the ticket in its transaction. A ticket lives
-- while its waiter renews it: a crashed waiter's ticket expires and is
-- skipped.
CREATE TABLE IF NOT EXISTS sqllock_semaphore_tickets (
    id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name       VARBINARY(255)  NOT NULL,
    owner      VARBINARY(255)  NOT NULL,
    expires_at DATETIME(6)     NOT NULL,
    KEY sqllock_semaphore_tickets_name_idx (name, id),
    KEY sqllock_semaphore_tickets_expires_at_idx (expires_at)
) ENGINE = InnoDB;

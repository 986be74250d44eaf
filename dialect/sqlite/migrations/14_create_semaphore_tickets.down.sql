DROP TABLE IF EXISTS sqllock_semaphore_tickets;

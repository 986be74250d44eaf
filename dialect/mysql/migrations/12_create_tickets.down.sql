DROP TABLE IF EXISTS sqllock_tickets;

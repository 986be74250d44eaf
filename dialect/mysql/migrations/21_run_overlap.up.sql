-- sqllock run ledger, overlap across occurrences (package ledger), MySQL 8 /
-- MariaDB 10.6+. An attempt is also 'skipped' (its occurrence came due
-- while another occurrence of its job ran, under the overlap policy skip)
-- or 'replaced' (it was running when a later occurrence of its job
-- replaced it, under the overlap policy replace). Both decide their
-- occurrence. The state column (VARCHAR(16)) has no CHECK here: nothing
-- to change but the schema's version.
DO 0;

//! PostgreSQL-only store tests: the fencing race against a takeover, the change feed across processes.

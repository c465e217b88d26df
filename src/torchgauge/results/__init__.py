"""Results: the versioned JSON schema (exchange format) and the SQLite store (history)."""

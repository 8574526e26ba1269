"""Store backends: SQLite (embedded) and PostgreSQL + pgvector (scale-out)."""

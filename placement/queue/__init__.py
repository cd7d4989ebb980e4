"""Queue-level policies (which waiting job starts next) and EASY backfilling."""

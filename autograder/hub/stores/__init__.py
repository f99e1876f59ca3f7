"""The hub's stores: SQLAlchemy models of their tables, alembic migrations that make and upgrade them (on
sqlite and PostgreSQL alike), and the transaction each store runs its writes in."""

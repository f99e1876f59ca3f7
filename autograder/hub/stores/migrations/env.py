"""The one alembic environment of the hub's stores (stores/migrate.py says why one): it migrates the
part named in the configuration on the connection the store passes, in the store's open transaction."""

from alembic import context

from autograder.hub.stores.models import BASES

_config = context.config
_part = _config.attributes["part"]
_connection = _config.attributes["connection"]
if _connection is None:
    raise RuntimeError("the hub's stores migrate themselves when opened (stores/migrate.py); there is no "
                       "database URL to migrate from the alembic command line")
context.configure(connection=_connection, target_metadata=BASES[_part].metadata,
                  version_table=_config.attributes["version_table"], render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()

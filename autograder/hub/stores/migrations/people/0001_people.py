"""The ledger of who is who as the hand-written DDL made it: made where it is not there, adopted where it is.

Revision ID: people_0001
"""

import sqlalchemy as sa
from alembic import op

revision = "people_0001"
down_revision = None


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table("people"):
        op.create_table(
            "people",
            sa.Column("issuer", sa.Text, primary_key=True),
            sa.Column("deployment_id", sa.Text, primary_key=True),
            sa.Column("sub", sa.Text, primary_key=True),
            sa.Column("account", sa.Text, nullable=False, unique=True),
        )


def downgrade() -> None:
    op.drop_table("people")

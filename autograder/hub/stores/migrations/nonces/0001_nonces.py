"""The launches' nonces as the hand-written DDL made them: made where they are not there, adopted where they
are.

Revision ID: nonces_0001
"""

import sqlalchemy as sa
from alembic import op

from autograder.hub.stores.columns import REAL

revision = "nonces_0001"
down_revision = None


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table("nonces"):
        op.create_table("nonces", sa.Column("nonce", sa.Text, primary_key=True),
                        sa.Column("expires", REAL, nullable=False))


def downgrade() -> None:
    op.drop_table("nonces")

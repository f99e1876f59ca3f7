"""The passback queue as the hand-written DDL made it: made where it is not there, adopted where it is.

Revision ID: passback_0001
"""

import sqlalchemy as sa
from alembic import op

from autograder.hub.stores.columns import REAL, SORTED_TEXT

revision = "passback_0001"
down_revision = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("scores"):
        return
    op.create_table(
        "scores",
        sa.Column("student", SORTED_TEXT, primary_key=True),
        sa.Column("assignment", SORTED_TEXT, primary_key=True),
        sa.Column("score", REAL, nullable=False),
        sa.Column("max_score", REAL, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("tries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_try", REAL, nullable=False),
        sa.Column("updated_at", REAL, nullable=False),
        sa.Column("sent_at", REAL),
        sa.Column("posts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("detail", sa.Text, nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_table("scores")

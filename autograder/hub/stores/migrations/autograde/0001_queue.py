"""The autograde queue as the hand-written DDL made it (before the hidden tests' setting): made where it is
not there, adopted where it is.

Revision ID: autograde_0001
"""

import sqlalchemy as sa
from alembic import op

from autograder.hub.stores.columns import REAL, SORTED_TEXT

revision = "autograde_0001"
down_revision = None


def upgrade() -> None:
    there = sa.inspect(op.get_bind())
    if not there.has_table("assignments"):
        op.create_table(
            "assignments",
            sa.Column("assignment", SORTED_TEXT, primary_key=True),
            sa.Column("enabled", sa.Integer, nullable=False),
            sa.Column("per_hour", sa.Integer, nullable=False, server_default="0"),
            sa.Column("timeout", REAL, nullable=False, server_default="120"),
        )
    if not there.has_table("submissions"):
        op.create_table(
            "submissions",
            sa.Column("student", SORTED_TEXT, primary_key=True),
            sa.Column("assignment", SORTED_TEXT, primary_key=True),
            sa.Column("timestamp", SORTED_TEXT, primary_key=True),
            sa.Column("folder", sa.Text, nullable=False),
            sa.Column("secret", sa.Text, nullable=False),
            sa.Column("state", sa.Text, nullable=False),
            sa.Column("place", REAL, nullable=False),
            sa.Column("seen_at", REAL, nullable=False),
            sa.Column("started_at", REAL),
            sa.Column("finished_at", REAL),
            sa.Column("tries", sa.Integer, nullable=False, server_default="0"),
            sa.Column("graded", sa.Integer, nullable=False, server_default="0"),
            sa.Column("status", sa.Text, nullable=False, server_default=""),
            sa.Column("score", REAL),
            sa.Column("max_score", REAL),
            sa.Column("detail", sa.Text, nullable=False, server_default=""),
        )
        op.create_index("by_state", "submissions", ["state", "place"])


def downgrade() -> None:
    op.drop_table("submissions")
    op.drop_table("assignments")

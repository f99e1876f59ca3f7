"""The exchange service's grading leases (before this they lived in its memory, and a restart freed them).

Revision ID: exchange_0001
"""

import sqlalchemy as sa
from alembic import op

from autograder.hub.stores.columns import REAL, SORTED_TEXT

revision = "exchange_0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "held_leases",
        sa.Column("assignment_id", SORTED_TEXT, primary_key=True),
        sa.Column("student_id", SORTED_TEXT, primary_key=True),
        sa.Column("timestamp", SORTED_TEXT, primary_key=True),
        sa.Column("lease_id", sa.Text, nullable=False),
        sa.Column("expires", REAL, nullable=False),
        sa.Column("protect_hidden_tests", sa.Integer),
        sa.Column("timeout", REAL),
        sa.Column("due", sa.Text),
    )
    op.create_table(
        "issued_leases",
        sa.Column("lease_id", sa.Text, primary_key=True),
        sa.Column("assignment_id", SORTED_TEXT, nullable=False),
        sa.Column("student_id", SORTED_TEXT, nullable=False),
        sa.Column("timestamp", SORTED_TEXT, nullable=False),
    )
    op.create_index("issued_by_submission", "issued_leases", ["assignment_id", "student_id", "timestamp"])


def downgrade() -> None:
    op.drop_table("issued_leases")
    op.drop_table("held_leases")

"""Each assignment says whether feedback on submit protects its hidden tests; a queue made before the
setting existed protects them (the hand migration that ran on sqlite only, now on either database).

Revision ID: autograde_0002
"""

import sqlalchemy as sa
from alembic import op

revision = "autograde_0002"
down_revision = "autograde_0001"


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("assignments")}
    if "hidden_tests" not in columns:  # the hand DDL of later hubs made it with the table
        op.add_column("assignments", sa.Column("hidden_tests", sa.Text, nullable=False,
                                               server_default="protected"))


def downgrade() -> None:
    with op.batch_alter_table("assignments") as batch:
        batch.drop_column("hidden_tests")

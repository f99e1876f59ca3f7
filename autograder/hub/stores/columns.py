"""The two column types whose spelling differs between sqlite and PostgreSQL, named once for the models and
the migrations (a migration is frozen, so it may not import a model, but these never change)."""

from sqlalchemy import Double, Text

# text compared and sorted byte by byte on either database, as sqlite does (PostgreSQL's default collation
# would order names by the server's locale, so two hubs would put students in different orders)
SORTED_TEXT = Text().with_variant(Text(collation="C"), "postgresql")
# double precision on either (sqlite's REAL): times in seconds since the epoch keep their microseconds
REAL = Double()

"""The records floor: the schema, every SQL statement, and the typed records they return."""

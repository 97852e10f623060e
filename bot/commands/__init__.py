"""Chat-ops: `/cockpit …` commands in PR comments, from parsing to the reply."""

"""The review engine: planning, running the reviewer, and the draft on GitHub."""

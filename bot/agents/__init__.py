"""Review agents: providers (Claude, Codex) driving one read-only toolbox inside a session."""

"""Model runs: providers (Claude, Codex, any Chat Completions server) and the read-only toolbox."""

"""Every text a person or a model reads: comment bodies (*.md.j2) and prompts (prompts/)."""

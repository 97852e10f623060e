"""PR Cockpit: AI pull-request reviews prepared as drafts that a human vets."""

__version__ = "0.1.0"

"""Eval replays: labelled PRs replayed through the production review pipeline and scored."""

"""Local stand-ins for the services the bot talks to (tests and `cockpit demo`)."""

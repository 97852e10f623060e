"""`python -m bot` is the `cockpit` command."""

from bot.cli import main

raise SystemExit(main())

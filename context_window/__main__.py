"""Entry point for ``python -m context_window``."""

from context_window.cli.main import main

raise SystemExit(main())

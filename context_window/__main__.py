"""Entry point for ``python -m context_window``."""

from context_window import main

raise SystemExit(main())

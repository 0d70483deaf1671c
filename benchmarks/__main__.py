"""``python -m benchmarks``: run every benchmark (see benchmarks/run.py)."""

from benchmarks.run import main

raise SystemExit(main())

"""``python -m tracebridge``: the ``tracebridge`` command (frontends/cli.py)."""

from .frontends.cli import main

raise SystemExit(main())

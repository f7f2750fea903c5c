"""``python -m runtime`` is the same as the ``ternary`` command."""

from runtime.cli import main

raise SystemExit(main())

"""`python -m loopstack ...`: the same command line as the `loopstack` script."""
from .cli import main

raise SystemExit(main())

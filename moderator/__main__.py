"""`python -m moderator` is the `moderator` command."""

import sys

from moderator.cli import main

sys.exit(main())

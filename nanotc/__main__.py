"""`python -m nanotc` is the `nanotc` command."""

import sys

from nanotc.cli.main import main

sys.exit(main())

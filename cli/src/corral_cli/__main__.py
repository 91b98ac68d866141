"""`python -m corral_cli` is the `corral` command."""

import sys

from corral_cli.main import main

sys.exit(main())

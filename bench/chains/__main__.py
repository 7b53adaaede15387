"""``python -m bench.chains``: the same as ``python -m bench.chains.run``."""

import sys

from bench.chains.run import main

sys.exit(main())

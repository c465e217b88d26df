"""``python -m torchgauge.cli ...``: the CLI of this interpreter (used by ``compare --confirm``)."""

import sys

from . import main

sys.exit(main())

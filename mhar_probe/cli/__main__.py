"""`python -m mhar_probe.cli ...` (what torchrun launches): the same as `mhar ...`."""

import sys

from . import main

sys.exit(main())

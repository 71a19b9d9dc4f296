"""`python -m mhar_probe.cpt ...` (torchrun launches it): an entry point, `mhar cpt ...`."""

import sys

from mhar_probe.cli.cpt import main

sys.exit(main())

"""``python -m doctor`` = ``rocm-doctor``."""

import sys

from doctor.cli import main

sys.exit(main())

"""``python -m gradwatch`` is the ``gradwatch`` command."""

import sys

from gradwatch.cli import main

sys.exit(main())

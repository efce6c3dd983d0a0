"""`python -m realtime_tts.cli ...` (what tests and benches spawn): the same as the `realtime-tts` script."""

import sys

from realtime_tts.cli import main

sys.exit(main())

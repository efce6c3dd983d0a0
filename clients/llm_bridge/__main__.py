"""`python clients/llm_bridge ...`: runs llm_bridge.main (this folder is first on sys.path)."""

import sys

from llm_bridge import main

sys.exit(main())

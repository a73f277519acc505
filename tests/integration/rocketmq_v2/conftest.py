"""The official client writes its log under ``$HOME/logs`` when first imported: import it through
:mod:`v2kit` (which points HOME at a temporary directory for that import) before any test module
imports ``rocketmq`` itself."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import v2kit  # noqa: F401

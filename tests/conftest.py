"""Suite-wide settings: log output that names the component, nothing else global."""

import logging

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

"""Suite-wide settings: log output that names the component, and a disk budget.

Brokers started as child processes (``orbitmq local up``, the chaos and replication tests)
read ``ORBITMQ_BROKER_*`` from the environment they inherit. Their default commit-log segment
is 1 GiB with its blocks reserved up front (as RocketMQ's), so a run that starts a dozen of
them needs gigabytes of free disk and fails with ENOSPC on a small CI machine. 8 MiB segments
keep a whole run to a few hundred MB; no test depends on the default segment size.
"""

import logging
import os

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

os.environ.setdefault("ORBITMQ_BROKER_SEGMENT_BYTES", str(8 * 1024 * 1024))

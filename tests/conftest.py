"""Suite-wide settings: log output that names the component, and a disk budget.

Brokers started as child processes (``orbitmq local up``, the chaos and replication tests)
read ``ORBITMQ_BROKER_*`` from the environment they inherit. Their default commit-log segment
is 1 GiB with its blocks reserved up front (as RocketMQ's), so a run that starts a dozen of
them needs gigabytes of free disk and fails with ENOSPC on a small CI machine. 8 MiB segments
keep a whole run to a few hundred MB; no test depends on the default segment size.

The disk ratios (RocketMQ's defaults: clean sooner past 75 % used, delete old segments past
85 %, refuse sends past 90 %) are of the whole filesystem, which a test machine shares with
other work: a suite run on a disk 86 % full would see segments deleted and sends refused that
no test asked for. The suite's brokers get ratios near 100 % (``brokerkit.TEST_SETTINGS`` for
those in the test process); the disk-full tests set their own on a small tmpfs.
"""

import logging
import os

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

os.environ.setdefault("ORBITMQ_BROKER_SEGMENT_BYTES", str(8 * 1024 * 1024))
SUITE_DISK_RATIOS = {
    "disk_max_used_space_ratio": 0.97,
    "disk_space_clean_forcibly_ratio": 0.98,
    "disk_space_warning_level_ratio": 0.99,
}
for _name, _ratio in SUITE_DISK_RATIOS.items():
    os.environ.setdefault(f"ORBITMQ_BROKER_{_name.upper()}", str(_ratio))

# gRPC's fork handlers off (read when grpc is first imported, so here, before any test module):
# the suite never uses gRPC in a forked child, but PySpark starts its JVM with fork + preexec_fn
# from this process, whose earlier tests leave gRPC threads running. With the handlers on, that
# fork logged "Other threads are currently calling into gRPC, skipping fork() handlers", the
# parent's poller hit EBADF and the JVM died before reporting its port (JAVA_GATEWAY_EXITED
# for every test using the session's SparkSession). A fork followed by exec needs no handlers.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

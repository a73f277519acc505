"""The garbage collector in a server process: what start-up built is kept out of its full passes.

CPython's full (generation 2) collection walks every tracked object, and a server holds tens of
thousands that only start-up created and that live as long as the process: modules, classes,
functions, protobuf descriptors, settings, the store's tables. On the 2-core bench machine a
broker held about 58 000 such objects and each full pass took 25-32 ms of CPU on the event
loop's thread — every pull and send waited behind it, and a loaded machine stretched it to
50-100 ms of wall time, one of the larger steps in the produce-to-consume p99 at 1 000 msg/s
(``orbitmq bench peer``'s ``latency_1000``). Full passes start once objects promoted since the
last one reach a quarter of those already in the oldest generation, which a message rate
reaches every few seconds (in-flight calls get promoted), so they keep coming.

:func:`freeze_startup_heap` collects once (so no start-up garbage is kept) and then moves every
survivor to the permanent generation (:func:`gc.freeze`). Later
collections walk only what the process built since; objects created later that become garbage
are collected as before. Only a process's own entry point calls it, once it is serving: a
library (the client) must not freeze its application's objects.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Collect the garbage start-up left, then exempt every surviving object from future
    collections; returns how many objects were frozen (the permanent generation's size)."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug("froze %d start-up objects in %.1f ms", frozen, (time.perf_counter() - started) * 1e3)
    return frozen

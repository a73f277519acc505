"""The root of every orbitmq exception.

Each role raises subclasses of :class:`OrbitError`; the attributes of the error (not the text of
its message) tell a caller what to do about it, so retry loops and request handlers can decide
without parsing strings.
"""

from __future__ import annotations


class OrbitError(Exception):
    """Base class of every error orbitmq raises on purpose.

    ``retriable`` says whether repeating the same operation later may succeed (a full disk, a
    broker that is starting) or whether it will fail the same way until something is changed
    (a corrupt file, an invalid name). Subclasses override the class attribute.
    """

    retriable: bool = False

"""Client library: admin now; producers and consumers follow (issue 4)."""

from orbitmq.client.admin import Admin

__all__ = ["Admin"]

"""The private descriptor pool of orbitmq's ``apache.rocketmq.v2`` modules.

The official Python client registers the same full names in protobuf's default pool; a pool of
our own lets both be imported in one process (see ``scripts/rocketmq_v2_protos.py``). It starts
with the well-known types the protocol imports, taken from their registered descriptors.
"""

from google.protobuf import descriptor_pool, duration_pb2, timestamp_pb2

POOL = descriptor_pool.DescriptorPool()
for _known in (timestamp_pb2, duration_pb2):
    POOL.AddSerializedFile(_known.DESCRIPTOR.serialized_pb)

"""The P4Runtime message classes, built from the schema the PyPI ``p4runtime`` package ships.

That package's ``p4/config/v1/*_pb2.py`` are generated in protobuf's old descriptor style, which current
protobuf refuses to load (and whose maps, e.g. ``type_info.structs``, the pure-Python backend then mishandles).
So we read each file's serialized ``FileDescriptorProto`` out of the installed distribution's module source
(found through ``importlib.metadata``, parsed with ``ast``, never imported or executed), load them into a
private descriptor pool and make the classes from it: the same schema, any protobuf backend, no interference
with the default pool or with our own top-level ``p4`` package (the PyPI one installs a ``p4`` package too).
"""

from __future__ import annotations

import ast
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, json_format, message_factory, text_format
from google.rpc import code_pb2, status_pb2  # googleapis-common-protos: p4runtime.proto's google.rpc.Status

__all__ = ["enum_value", "json_format", "message_class", "text_format"]

_FILES = ("p4/config/v1/p4types.proto", "p4/config/v1/p4info.proto", "p4/v1/p4data.proto",
          "p4/v1/p4runtime.proto")   # dependencies first


def _serialized_file(proto_path: str) -> bytes:
    """The serialized FileDescriptorProto of ``proto_path`` embedded in the p4runtime package's _pb2 module."""
    module = proto_path.removesuffix(".proto") + "_pb2.py"
    try:       # by the distribution's files: its top-level ``p4`` package would clash with ours if imported
        source = Path(str(metadata.distribution("p4runtime").locate_file(module))).read_text()
    except (metadata.PackageNotFoundError, FileNotFoundError) as exc:
        raise ImportError(f"the PyPI p4runtime package is not installed ({module}): run scripts/bootstrap.sh"
                          ) from exc
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
            try:
                fd = descriptor_pb2.FileDescriptorProto.FromString(node.value)
            except Exception:  # noqa: BLE001 - any other bytes literal is simply not the descriptor
                continue
            if fd.name == proto_path:
                return node.value
    raise ImportError(f"no descriptor of {proto_path} in the p4runtime package's {module}")


def _role_config_file() -> descriptor_pb2.FileDescriptorProto:
    """Stratum's ``stratum.P4RoleConfig`` (stratum/public/proto/p4_role_config.proto), the role config P4Runtime
    servers accept in ``Role.config``: the P4 ids a role may write (exclusively or shared), whether it may push
    a pipeline and receive PacketIns (those whose metadata field equals the filter's value, when one is set)."""
    fd = descriptor_pb2.FileDescriptorProto(name="stratum/public/proto/p4_role_config.proto", package="stratum",
                                            syntax="proto3")
    msg = fd.message_type.add(name="P4RoleConfig")
    flt = msg.nested_type.add(name="PacketFilter")
    F = descriptor_pb2.FieldDescriptorProto
    flt.field.add(name="metadata_id", number=1, type=F.TYPE_UINT32, label=F.LABEL_OPTIONAL)
    flt.field.add(name="value", number=2, type=F.TYPE_BYTES, label=F.LABEL_OPTIONAL)
    msg.field.add(name="exclusive_p4_ids", number=1, type=F.TYPE_UINT32, label=F.LABEL_REPEATED)
    msg.field.add(name="shared_p4_ids", number=2, type=F.TYPE_UINT32, label=F.LABEL_REPEATED)
    msg.field.add(name="packet_in_filter", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                  type_name=".stratum.P4RoleConfig.PacketFilter")
    msg.field.add(name="receives_packet_ins", number=4, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    msg.field.add(name="can_push_pipeline", number=5, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    return fd


@cache
def _pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(any_pb2.DESCRIPTOR.serialized_pb)
    for module in (code_pb2, status_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    for path in _FILES:
        pool.AddSerializedFile(_serialized_file(path))
    pool.Add(_role_config_file())
    return pool


@cache
def message_class(full_name: str) -> Any:
    """The message class of ``full_name`` (e.g. ``p4.config.v1.P4Info``, ``p4.v1.WriteRequest``)."""
    return message_factory.GetMessageClass(_pool().FindMessageTypeByName(full_name))


def enum_value(full_enum: str, name: str) -> int:
    """The number of enum value ``name`` of enum ``full_enum`` (e.g. ``p4.config.v1.P4Ids.Prefix``, ``TABLE``)."""
    return int(_pool().FindEnumTypeByName(full_enum).values_by_name[name].number)

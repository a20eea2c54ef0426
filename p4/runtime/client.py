"""A raw-gRPC P4Runtime v1 client over the ``p4runtime`` schema's messages (no generated stubs).

The PyPI P4Runtime clients do not fit the project's pins (p4runtime-shell wants protobuf < 3.21 and p4runtime
1.4.1; finsy wants protobuf < 7), so tests and the fabric's control plane speak the protocol with this: a
``StreamChannel`` for arbitration, then Write/Read/SetForwardingPipelineConfig as unary calls.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import grpc

from p4.p4runtime_proto import enum_value, message_class

_M = message_class
SERVICE = "/p4.v1.P4Runtime/"
UPDATE_TYPES = {n: enum_value("p4.v1.Update.Type", n) for n in ("INSERT", "MODIFY", "DELETE")}


def decode_write_errors(err: grpc.RpcError) -> list[tuple[int, str]]:
    """Per-update (google.rpc code, message) from a failed Write's ``grpc-status-details-bin`` trailer."""
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = _M("google.rpc.Status").FromString(value)
            out = []
            for any_msg in status.details:
                e = _M("p4.v1.Error")()
                any_msg.Unpack(e)
                out.append((e.canonical_code, e.message))
            return out
    return []


class P4RuntimeClient:
    """One controller of one device, in one role (``role``: its name, "" the default role): ``arbitrate()``
    (becomes the role's primary with the highest election id), then ``set_pipeline``/``write``/``read``."""

    def __init__(self, address: str, device_id: int = 0, election_id: int = 1, timeout_s: float = 30.0,
                 role: str = "", role_config: Any = None) -> None:
        self.channel = grpc.insecure_channel(address)
        self.device_id, self.election_id, self.timeout_s, self.role = device_id, election_id, timeout_s, role
        self.role_config = role_config     # a stratum.P4RoleConfig sent with the role's arbitration, or None
        self._out: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._in: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stream: Any = None

    def _unary(self, method: str, req: Any, resp: str) -> Any:
        call = self.channel.unary_unary(SERVICE + method, request_serializer=type(req).SerializeToString,
                                        response_deserializer=_M(resp).FromString)
        return call(req, timeout=self.timeout_s)

    def _election(self, msg: Any) -> None:
        msg.high, msg.low = self.election_id >> 64, self.election_id & ((1 << 64) - 1)

    def arbitrate(self) -> Any:
        """Open the StreamChannel and send the arbitration; returns the switch's MasterArbitrationUpdate."""
        def requests() -> Iterator[Any]:
            while True:
                item = self._out.get()
                if item is None:
                    return
                yield item

        call = self.channel.stream_stream(SERVICE + "StreamChannel",
                                          request_serializer=_M("p4.v1.StreamMessageRequest").SerializeToString,
                                          response_deserializer=_M("p4.v1.StreamMessageResponse").FromString)
        self._stream = call(requests())

        def pump() -> None:
            try:
                for msg in self._stream:
                    self._in.put(msg)
            except grpc.RpcError as exc:
                self._in.put(exc)
            self._in.put(None)

        threading.Thread(target=pump, daemon=True, name="p4rt-client-stream").start()
        req = _M("p4.v1.StreamMessageRequest")()
        req.arbitration.device_id = self.device_id
        if self.role:
            req.arbitration.role.name = self.role
        if self.role_config is not None:
            req.arbitration.role.config.Pack(self.role_config)
        self._election(req.arbitration.election_id)
        self._out.put(req)
        return self.next_stream_message().arbitration

    def next_stream_message(self, timeout_s: float | None = None) -> Any:
        """The next StreamMessageResponse (raises the stream's grpc.RpcError if it ended with one)."""
        msg = self._in.get(timeout=timeout_s or self.timeout_s)
        if isinstance(msg, grpc.RpcError):
            raise msg
        if msg is None:
            raise EOFError("the switch closed the StreamChannel")
        return msg

    def packet_out(self, payload: bytes, metadata: dict[int, int] | None = None) -> None:
        """Send a PacketOut on the stream (``metadata``: packet_out header field id -> value)."""
        from p4.runtime.entities import to_bytes

        req = _M("p4.v1.StreamMessageRequest")()
        req.packet.payload = payload
        for mid, value in (metadata or {}).items():
            md = req.packet.metadata.add()
            md.metadata_id, md.value = mid, to_bytes(value, 0)
        self._out.put(req)

    def digest_ack(self, digest_id: int, list_id: int) -> None:
        """Acknowledge a DigestList on the stream (the switch may then send the same digest data again)."""
        req = _M("p4.v1.StreamMessageRequest")()
        req.digest_ack.digest_id, req.digest_ack.list_id = digest_id, list_id
        self._out.put(req)

    def set_pipeline(self, p4info: Any, device_config: bytes, action: str = "VERIFY_AND_COMMIT") -> Any:
        req = _M("p4.v1.SetForwardingPipelineConfigRequest")()
        req.device_id, req.role = self.device_id, self.role
        self._election(req.election_id)
        req.action = enum_value("p4.v1.SetForwardingPipelineConfigRequest.Action", action)
        req.config.p4info.CopyFrom(p4info)
        req.config.p4_device_config = device_config
        return self._unary("SetForwardingPipelineConfig", req, "p4.v1.SetForwardingPipelineConfigResponse")

    def get_pipeline(self) -> Any:
        req = _M("p4.v1.GetForwardingPipelineConfigRequest")(device_id=self.device_id)
        return self._unary("GetForwardingPipelineConfig", req, "p4.v1.GetForwardingPipelineConfigResponse").config

    def write(self, updates: list[tuple[str, Any]], atomicity: str = "CONTINUE_ON_ERROR") -> None:
        """Apply (update type name, Entity) pairs in one WriteRequest; a failure raises grpc.RpcError."""
        req = _M("p4.v1.WriteRequest")()
        req.device_id, req.role = self.device_id, self.role
        req.atomicity = enum_value("p4.v1.WriteRequest.Atomicity", atomicity)
        self._election(req.election_id)
        for kind, entity in updates:
            u = req.updates.add()
            u.type = UPDATE_TYPES[kind]
            u.entity.CopyFrom(entity)
        self._unary("Write", req, "p4.v1.WriteResponse")

    def read(self, entities: list[Any]) -> list[Any]:
        req = _M("p4.v1.ReadRequest")(device_id=self.device_id)
        req.entities.extend(entities)
        call = self.channel.unary_stream(SERVICE + "Read", request_serializer=type(req).SerializeToString,
                                         response_deserializer=_M("p4.v1.ReadResponse").FromString)
        return [e for resp in call(req, timeout=self.timeout_s) for e in resp.entities]

    def capabilities(self) -> str:
        return self._unary("Capabilities", _M("p4.v1.CapabilitiesRequest")(),
                           "p4.v1.CapabilitiesResponse").p4runtime_api_version

    def close(self) -> None:
        self._out.put(None)
        if self._stream is not None:
            self._stream.cancel()
        self.channel.close()

    def __enter__(self) -> P4RuntimeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _find(objs: Any, name: str, what: str) -> Any:
    for o in objs:
        if name in (o.preamble.name, o.preamble.alias):
            return o
    raise KeyError(f"no {what} {name!r} in the P4Info")


def table_entry(p4info: Any, table: str, match: dict[str, Any] | None = None, action: str | None = None,
                params: dict[str, int] | None = None, priority: int = 0, default: bool = False) -> Any:
    """An ``Entity`` holding a table entry, by names: match values are ``v`` (exact, optional), ``(v, plen)``
    (lpm), ``(v, mask)`` (ternary), ``(low, high)`` (range); ints are written as canonical byte strings."""
    from p4.runtime.entities import to_bytes

    t = _find(p4info.tables, table, "table")
    ent = _M("p4.v1.Entity")()
    te = ent.table_entry
    te.table_id, te.priority, te.is_default_action = t.preamble.id, priority, default
    fields = {f.name: f for f in t.match_fields}
    kinds = {enum_value("p4.config.v1.MatchField.MatchType", k): k.lower()
             for k in ("EXACT", "LPM", "TERNARY", "RANGE", "OPTIONAL")}
    for name, value in (match or {}).items():
        f = fields[name]
        fm = te.match.add()
        fm.field_id = f.id
        kind = kinds[f.match_type]
        if kind == "exact":
            fm.exact.value = to_bytes(value, f.bitwidth)
        elif kind == "optional":
            fm.optional.value = to_bytes(value, f.bitwidth)
        elif kind == "lpm":
            fm.lpm.value, fm.lpm.prefix_len = to_bytes(value[0], f.bitwidth), value[1]
        elif kind == "ternary":
            fm.ternary.value, fm.ternary.mask = to_bytes(value[0], f.bitwidth), to_bytes(value[1], f.bitwidth)
        else:
            fm.range.low, fm.range.high = to_bytes(value[0], f.bitwidth), to_bytes(value[1], f.bitwidth)
    if action is not None:
        a = _find(p4info.actions, action, "action")
        te.action.action.action_id = a.preamble.id
        pids = {p.name: p for p in a.params}
        for pname, value in (params or {}).items():
            p = te.action.action.params.add()
            p.param_id, p.value = pids[pname].id, to_bytes(value, pids[pname].bitwidth)
    return ent

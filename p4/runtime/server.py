"""The P4Runtime v1 gRPC service (``p4.v1.P4Runtime``) of a running ``EmbeddedSwitch``.

gRPC handlers run on grpc's worker threads; everything touching the pipeline is handed to the switch's own
loop (``SwitchCalls``: a queue plus a wake-up socket in its selector), so writes land between packets as the
control socket's commands do.  Served: StreamChannel (primary/backup arbitration by election id per role; role
configs as Stratum's ``stratum.P4RoleConfig``; PacketIn/PacketOut through @controller_header headers on the CPU
port; DigestLists of enabled digests, batched by their config, acked), SetForwardingPipelineConfig (VERIFY,
VERIFY_AND_SAVE, VERIFY_AND_COMMIT, COMMIT) and GetForwardingPipelineConfig, Write (all atomicity modes; per-update
``p4.v1.Error`` in the status details), Read (streamed), Capabilities.  The device config is the P4_16 program's
source text (UTF-8), which the switch compiles itself; its P4Info must be the one ``p4 check --p4runtime-files``
(and p4c) writes for it.
"""

from __future__ import annotations

import queue
import selectors
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from p4.errors import P4Error
from p4.p4runtime_proto import enum_value, message_class
from p4.runtime.entities import EntityError, ForwardingDevice, code_number, entity_p4_id, from_bytes, to_bytes

if TYPE_CHECKING:
    from p4.switch.switch import EmbeddedSwitch

SERVICE = "p4.v1.P4Runtime"
CALL_TIMEOUT_S = 30.0          # how long a handler waits for the switch loop to run its call
_M = message_class
_ACTION = "p4.v1.SetForwardingPipelineConfigRequest.Action"
VERIFY, VERIFY_AND_SAVE, VERIFY_AND_COMMIT, COMMIT = (enum_value(_ACTION, n) for n in (
    "VERIFY", "VERIFY_AND_SAVE", "VERIFY_AND_COMMIT", "COMMIT"))
_ATOMICITY_CONTINUE = enum_value("p4.v1.WriteRequest.Atomicity", "CONTINUE_ON_ERROR")
_ATOMICITIES = {enum_value("p4.v1.WriteRequest.Atomicity", n) for n in (
    "CONTINUE_ON_ERROR", "ROLLBACK_ON_ERROR", "DATAPLANE_ATOMIC")}
_RESPONSE_TYPE = "p4.v1.GetForwardingPipelineConfigRequest.ResponseType"
T = TypeVar("T")


class GrpcAddressError(P4Error):
    """A ``--grpc-port`` value that is neither a TCP port nor ``unix:PATH``."""


def grpc_listen_address(text: str) -> str:
    """``9559`` -> ``0.0.0.0:9559`` (as BMv2's simple_switch_grpc); ``unix:PATH`` as is (reachable across
    network namespaces through the file system)."""
    if text.startswith("unix:") and len(text) > 5:
        return text
    if text.isdigit() and 1 <= int(text) <= 65535:
        return f"0.0.0.0:{int(text)}"
    raise GrpcAddressError(f"--grpc-port {text}: expected a TCP port 1..65535 or unix:PATH")


class RpcError(Exception):
    """Ends an RPC with gRPC status ``code`` (a google.rpc.Code name) and ``message``."""

    def __init__(self, code: str, message: str, details: bytes | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.details = code, message, details


class SwitchCalls:
    """Runs callables on the switch's loop thread for other threads (``call(fn)`` waits for the result)."""

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], futures.Future]] = queue.SimpleQueue()
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        self._selector = selector
        selector.register(self._r, selectors.EVENT_READ, self._run_pending)

    def call(self, fn: Callable[[], T]) -> T:
        fut: futures.Future = futures.Future()
        self._queue.put((fn, fut))
        try:
            self._w.send(b"x")
        except BlockingIOError:
            pass                     # a wake-up is already pending
        try:
            return fut.result(timeout=CALL_TIMEOUT_S)
        except futures.TimeoutError:
            raise RpcError("UNAVAILABLE", f"the switch loop did not run the request within {CALL_TIMEOUT_S:g} s")\
                from None

    def _run_pending(self, _sock: socket.socket) -> None:
        try:
            while self._r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                fn, fut = self._queue.get_nowait()
            except queue.Empty:
                return
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting RPC thread
                fut.set_exception(exc)

    def close(self) -> None:
        try:
            self._selector.unregister(self._r)
        except (KeyError, ValueError):
            pass
        self._r.close()
        self._w.close()


IDLE_SWEEP_NS = 100_000_000      # how often idle timeouts are checked, in network time
DIGEST_UNACKED_PRUNE = 10_000    # sent-but-unacked digest data kept before the expired ones are dropped


@dataclass
class _DigestBuffer:
    """Digests of one id waiting for their DigestList; ``serial`` moves on each time the buffer is sent."""

    data: list[Any] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    serial: int = 0


@dataclass
class _Stream:
    """One StreamChannel: its election id (None before arbitration) and its outgoing messages."""

    out: queue.SimpleQueue
    election_id: tuple[int, int] | None = None
    role: str = ""                   # its role's name ("": the default role), fixed by its first arbitration


class P4RuntimeService:
    """The service's state: device id, the committed pipeline's ``ForwardingDevice``, arbitration."""

    def __init__(self, switch: EmbeddedSwitch, device_config: bytes) -> None:
        self.switch = switch
        self.device_id = switch.config.device_id
        self.calls = SwitchCalls(switch.selector)
        self.device = ForwardingDevice(switch.pipeline.pipe)
        self.device_config = device_config
        self.cookie = 0
        self._saved: tuple[Any, Any, bytes, int] | None = None      # VERIFY_AND_SAVE's pipeline, for COMMIT
        self._lock = threading.Lock()
        self._streams: list[_Stream] = []
        self._role_configs: dict[str, Any] = {}     # role name -> its primary's stratum.P4RoleConfig
        self._build_lock = threading.Lock()
        if switch.config.cpu_port is not None:
            switch.packet_in_listeners.append(self._packet_in)
        switch.digest_listeners.append(self._digest)
        self._digest_list_id = 0
        self._digest_lock = threading.Lock()
        self._digest_bufs: dict[int, _DigestBuffer] = {}
        self._unacked: dict[tuple[int, bytes], tuple[int, int]] = {}   # (digest, data) -> (expiry ns, list id)
        self._lists: dict[int, list[tuple[int, bytes]]] = {}             # list id -> its (digest, data) keys
        self._closed = threading.Event()
        threading.Thread(target=self._idle_sweeps, daemon=True, name="p4rt-idle-timeout").start()

    def _idle_sweeps(self) -> None:
        """Every ``IDLE_SWEEP_NS`` of network time: entries idle past their idle_timeout_ns go to the primary
        controller in one IdleTimeoutNotification (each once until it is hit again)."""
        while not self._closed.is_set():
            self.switch.clock.sleep_ns(IDLE_SWEEP_NS)
            if self._closed.is_set():
                return
            if not any(t.support_timeout for t in self.device.state.tables.values()):
                continue                         # no table of this pipeline has idle timeouts
            try:
                idle = self.calls.call(lambda: self.device.idle_entries())
            except (RpcError, OSError):
                continue                         # the switch loop is busy or gone: try at the next sweep
            if idle:
                msg = _M("p4.v1.StreamMessageResponse")()
                msg.idle_timeout_notification.table_entry.extend(idle)
                msg.idle_timeout_notification.timestamp = self.switch.wall_ns(self.switch.clock.now_ns())
                self._to_primary(msg)

    def _digest(self, digest: dict[str, Any]) -> None:
        """A digest the program made (switch thread), for the primary controller when it enabled that digest
        with a DigestEntry.  Its config batches them: a DigestList leaves when ``max_list_size`` digests are
        buffered (0: no limit) or ``max_timeout_ns`` (network time) after the first (0: at once); data sent in
        a list not yet acked is not sent again within ``ack_timeout_ns``, nor twice in one list."""
        found = self.device.digest_data(digest)
        if found is None:
            return
        did, data = found
        cfg = self.device.digest_configs[did]
        key = data.SerializeToString()
        now_ns = self.switch.clock.now_ns()
        msg = None
        with self._digest_lock:
            pending = self._unacked.get((did, key))
            if pending is not None and now_ns < pending[0]:
                return                                     # sent, not acked yet: a duplicate
            buf = self._digest_bufs.setdefault(did, _DigestBuffer())
            if key in buf.keys:
                return
            buf.keys.append(key)
            buf.data.append(data)
            if cfg.max_timeout_ns <= 0 or 0 < cfg.max_list_size <= len(buf.data):
                msg = self._digest_list(did, buf, cfg.ack_timeout_ns, now_ns)
            elif len(buf.data) == 1:
                threading.Thread(target=self._flush_after, args=(did, buf.serial, cfg.max_timeout_ns), daemon=True,
                                 name="p4rt-digest-timeout").start()
        if msg is not None:
            self._to_primary(msg)

    def _digest_list(self, did: int, buf: _DigestBuffer, ack_timeout_ns: int, now_ns: int) -> Any:
        """The DigestList of what ``buf`` holds (emptied), remembered for its ack (lock held)."""
        self._digest_list_id += 1
        lid = self._digest_list_id
        msg = _M("p4.v1.StreamMessageResponse")()
        dl = msg.digest
        dl.digest_id, dl.list_id = did, lid
        dl.data.extend(buf.data)
        dl.timestamp = self.switch.wall_ns(now_ns)
        if ack_timeout_ns > 0:
            if len(self._unacked) > DIGEST_UNACKED_PRUNE:
                self._unacked = {k: v for k, v in self._unacked.items() if v[0] > now_ns}
                self._lists = {i: ks for i, ks in self._lists.items() if any(k in self._unacked for k in ks)}
            for k in buf.keys:
                self._unacked[(did, k)] = (now_ns + ack_timeout_ns, lid)
            self._lists[lid] = [(did, k) for k in buf.keys]
        buf.data, buf.keys = [], []
        buf.serial += 1
        return msg

    def _flush_after(self, did: int, serial: int, timeout_ns: int) -> None:
        """Send digest ``did``'s buffer ``timeout_ns`` of network time after its first digest, unless it left
        already (its serial moved on) or the digest was disabled meanwhile."""
        self.switch.clock.sleep_ns(timeout_ns)
        with self._digest_lock:
            buf = self._digest_bufs.get(did)
            cfg = self.device.digest_configs.get(did)
            if buf is None or buf.serial != serial or not buf.data:
                return
            if cfg is None:
                buf.data, buf.keys = [], []
                return
            msg = self._digest_list(did, buf, cfg.ack_timeout_ns, self.switch.clock.now_ns())
        self._to_primary(msg)

    def _digest_ack(self, ack: Any) -> None:
        """A DigestListAck: that list's data may be sent again."""
        with self._digest_lock:
            for key in self._lists.pop(ack.list_id, []):
                if self._unacked.get(key, (0, -1))[1] == ack.list_id:
                    del self._unacked[key]

    def _to_primary(self, msg: Any) -> None:
        """A PacketIn, DigestList or IdleTimeoutNotification to the primary of every role whose config lets it
        have it (a role without a config has the whole switch)."""
        with self._lock:
            for role in {s.role for s in self._streams}:
                primary = self._primary(role)
                if primary is None or not self._role_receives(role, msg):
                    continue
                for s in self._streams:
                    if s.role == role and s.election_id == primary:
                        s.out.put(msg)

    def _role_receives(self, role: str, msg: Any) -> bool:
        """Whether ``role``'s config lets it receive ``msg``: PacketIns when ``receives_packet_ins`` (and the
        packet_in_filter's metadata equals its value, when set); a DigestList when its digest's id is among the
        config's p4 ids, an IdleTimeoutNotification when one of its entries' tables is."""
        cfg = self._role_configs.get(role)
        if cfg is None:
            return True
        which = msg.WhichOneof("update")
        if which == "packet":
            if not cfg.receives_packet_ins:
                return False
            flt = cfg.packet_in_filter
            if flt.metadata_id:
                return any(m.metadata_id == flt.metadata_id and m.value == flt.value for m in msg.packet.metadata)
            return True
        ids = {*cfg.exclusive_p4_ids, *cfg.shared_p4_ids}
        if which == "digest":
            return msg.digest.digest_id in ids
        return any(e.table_id in ids for e in msg.idle_timeout_notification.table_entry)

    def _write_allowed(self, role: str, entity: Any) -> str:
        """'' when ``role`` may write ``entity``; else why not (its config does not list the object's id)."""
        cfg = self._role_configs.get(role)
        if cfg is None:
            return ""
        pid = entity_p4_id(entity)
        if pid is None:
            return f"role '{role}' has a role config: the packet replication engine is the default role's"
        if pid not in {*cfg.exclusive_p4_ids, *cfg.shared_p4_ids}:
            return f"role '{role}' may not write P4 object {pid} (not in its role config's p4 ids)"
        return ""

    # --- packet I/O through @controller_header headers ----------------------------------------------------------
    def _controller_header(self, name: str) -> list[tuple[int, int]]:
        """(metadata id, bit width) of the ``@controller_header(name)`` header, [] when the program has none."""
        for cpm in self.device.p4info.controller_packet_metadata:
            if cpm.preamble.name == name:
                return [(m.id, m.bitwidth) for m in cpm.metadata]
        return []

    def _packet_in(self, frame: bytes) -> None:
        """A frame the program sent to the CPU port (switch thread): its packet_in header becomes metadata, the
        rest the payload; it goes to the primary controller's stream."""
        fields = self._controller_header("packet_in")
        nbytes = (sum(w for _, w in fields) + 7) // 8
        msg = _M("p4.v1.StreamMessageResponse")()
        msg.packet.payload = frame[nbytes:]
        value, left = int.from_bytes(frame[:nbytes], "big"), nbytes * 8
        for mid, width in fields:
            left -= width
            md = msg.packet.metadata.add()
            md.metadata_id, md.value = mid, to_bytes((value >> left) & ((1 << width) - 1), width)
        self._to_primary(msg)

    def _packet_out(self, stream: _Stream, packet: Any) -> None:
        """A controller's PacketOut: its metadata packed as the packet_out header before the payload, into
        ingress on the CPU port; a bad one is answered with a StreamError on that stream."""
        try:
            with self._lock:
                if stream.election_id != self._primary(stream.role):
                    raise EntityError("PERMISSION_DENIED", "PacketOut from a controller that is not primary")
            cpu_port = self.switch.config.cpu_port
            if cpu_port is None:
                raise EntityError("FAILED_PRECONDITION", "the switch has no CPU port (start it with --cpu-port N)")
            given = {m.metadata_id: m.value for m in packet.metadata}
            fields = self._controller_header("packet_out")
            unknown = set(given) - {mid for mid, _ in fields}
            if unknown:
                raise EntityError("INVALID_ARGUMENT", f"PacketOut metadata ids {sorted(unknown)} are not fields of "
                                                      "the program's packet_out header")
            value, bits = 0, 0
            for mid, width in fields:
                v = from_bytes(given[mid], width, f"PacketOut metadata {mid}") if mid in given else 0
                value, bits = (value << width) | v, bits + width
            pad = (8 - bits % 8) % 8
            frame = (value << pad).to_bytes((bits + pad) // 8, "big") + packet.payload if bits else packet.payload
            self.calls.call(lambda: self.switch.inject(cpu_port, frame))
        except EntityError as exc:
            msg = _M("p4.v1.StreamMessageResponse")()
            msg.error.canonical_code, msg.error.message = code_number(exc.code), str(exc)
            msg.error.packet_out.packet_out.CopyFrom(packet)
            stream.out.put(msg)

    # --- arbitration -----------------------------------------------------------------------------------------
    def _primary(self, role: str = "") -> tuple[int, int] | None:
        """The highest election id among the role's controllers: its primary."""
        ids = [s.election_id for s in self._streams if s.election_id is not None and s.role == role]
        return max(ids) if ids else None

    def _notify(self, streams: list[_Stream]) -> None:
        """Tell ``streams`` who is primary of their role (OK to the primary, ALREADY_EXISTS to backups)."""
        for s in streams:
            if s.election_id is None:
                continue
            primary = self._primary(s.role)
            msg = _M("p4.v1.StreamMessageResponse")()
            arb = msg.arbitration
            arb.device_id = self.device_id
            if s.role:
                arb.role.name = s.role
            arb.election_id.high, arb.election_id.low = primary if primary is not None else (0, 0)
            if s.election_id == primary:
                arb.status.code, arb.status.message = code_number("OK"), "is primary"
            else:
                arb.status.code, arb.status.message = code_number("ALREADY_EXISTS"), "is not primary"
            s.out.put(msg)

    def _arbitrate(self, stream: _Stream, arb: Any) -> None:
        if arb.device_id != self.device_id:
            raise RpcError("NOT_FOUND", f"arbitration for device {arb.device_id}; this switch is device "
                                        f"{self.device_id}")
        role = arb.role.name if arb.HasField("role") else ""
        config = self._role_config(role, arb.role.config) if arb.HasField("role") and arb.role.HasField(
            "config") else None
        eid = (arb.election_id.high, arb.election_id.low)
        with self._lock:
            if config is not None:
                for other, cfg in self._role_configs.items():
                    taken = (set(config.exclusive_p4_ids) & {*cfg.exclusive_p4_ids, *cfg.shared_p4_ids}) | (
                        set(config.shared_p4_ids) & set(cfg.exclusive_p4_ids))
                    if other != role and taken:
                        raise RpcError("INVALID_ARGUMENT", f"role '{role}': P4 ids {sorted(taken)} are exclusive "
                                                           f"to one of roles '{role}' and '{other}'")
            if stream.election_id is not None and role != stream.role:
                raise RpcError("FAILED_PRECONDITION", f"this stream arbitrated for role '{stream.role}', not "
                                                      f"'{role}' (open another stream)")
            if stream.election_id != eid and any(s.election_id == eid and s.role == role
                                                 for s in self._streams if s is not stream):
                raise RpcError("INVALID_ARGUMENT", f"election id {eid[0] << 64 | eid[1]} is used by another "
                                                   f"controller of role '{role}'")
            before = self._primary(role)
            stream.election_id, stream.role = eid, role
            if self._primary(role) == eid:        # the role's primary sets its config (or clears it, sending none)
                if config is None:
                    self._role_configs.pop(role, None)
                else:
                    self._role_configs[role] = config
            peers = [s for s in self._streams if s.role == role]
            self._notify(peers if self._primary(role) != before else [stream])   # all of the role when it changed

    @staticmethod
    def _role_config(role: str, packed: Any) -> Any:
        """``Role.config`` unpacked: a ``stratum.P4RoleConfig`` of a named role (the default role has the whole
        switch and takes none)."""
        cls = _M("stratum.P4RoleConfig")
        if not role:
            raise RpcError("INVALID_ARGUMENT", "the default role (no name) takes no role config")
        if not packed.Is(cls.DESCRIPTOR):
            raise RpcError("INVALID_ARGUMENT", f"role '{role}': role config {packed.type_url!r} is not a "
                                               "stratum.P4RoleConfig")
        config = cls()
        packed.Unpack(config)
        return config

    def _check_primary(self, device_id: int, election: Any, role: str = "") -> None:
        if device_id != self.device_id:
            raise RpcError("NOT_FOUND", f"device {device_id}: this switch is device {self.device_id}")
        eid = (election.high, election.low)
        with self._lock:
            if self._primary(role) != eid:
                raise RpcError("PERMISSION_DENIED", f"election id {eid[0] << 64 | eid[1]} is not the primary "
                                                    f"controller's of role '{role}' (open a StreamChannel and "
                                                    "arbitrate first)")

    def stream_channel(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        stream = _Stream(queue.SimpleQueue())
        with self._lock:
            self._streams.append(stream)

        def reader() -> None:
            try:
                for req in requests:
                    which = req.WhichOneof("update")
                    if which == "arbitration":
                        self._arbitrate(stream, req.arbitration)
                    elif stream.election_id is None:
                        raise RpcError("FAILED_PRECONDITION", "the first stream message must be an arbitration")
                    elif which == "packet":
                        self._packet_out(stream, req.packet)
                    elif which == "digest_ack":
                        self._digest_ack(req.digest_ack)
                    else:
                        raise RpcError("UNIMPLEMENTED", f"stream message {which} is not supported")
            except RpcError as exc:
                stream.out.put(exc)
            except Exception as exc:  # noqa: BLE001 - a cancelled stream ends the reader
                stream.out.put(RpcError("CANCELLED", str(exc)) if context.is_active() else None)
            stream.out.put(None)

        threading.Thread(target=reader, daemon=True, name="p4rt-stream").start()
        try:
            while True:
                item = stream.out.get()
                if item is None:
                    return
                if isinstance(item, RpcError):
                    _abort(context, item)
                yield item
        finally:
            with self._lock:
                before = self._primary(stream.role)
                self._streams.remove(stream)
                if not any(s.role == stream.role and s.election_id is not None for s in self._streams):
                    self._role_configs.pop(stream.role, None)        # the role's last controller left
                if self._primary(stream.role) != before:
                    self._notify([s for s in self._streams if s.role == stream.role])

    # --- pipeline config -------------------------------------------------------------------------------------
    def set_pipeline(self, req: Any, context: grpc.ServicerContext) -> Any:
        self._check_primary(req.device_id, req.election_id, req.role)
        cfg = self._role_configs.get(req.role)
        if cfg is not None and not cfg.can_push_pipeline:
            raise RpcError("PERMISSION_DENIED", f"role '{req.role}': its role config does not allow pushing a "
                                                "pipeline (can_push_pipeline)")
        if req.action == COMMIT:
            if self._saved is None:
                raise RpcError("FAILED_PRECONDITION", "COMMIT without a saved config (VERIFY_AND_SAVE first)")
            self._commit(*self._saved)
            self._saved = None
            return _M("p4.v1.SetForwardingPipelineConfigResponse")()
        if req.action not in (VERIFY, VERIFY_AND_SAVE, VERIFY_AND_COMMIT):
            raise RpcError("UNIMPLEMENTED", "action must be VERIFY, VERIFY_AND_SAVE, VERIFY_AND_COMMIT or COMMIT")
        cfg = req.config
        with self._build_lock:
            sp, device = self._build(cfg.p4info, cfg.p4_device_config)
        if req.action == VERIFY_AND_SAVE:
            self._saved = (sp, device, cfg.p4_device_config, cfg.cookie.cookie)
        elif req.action == VERIFY_AND_COMMIT:
            self._commit(sp, device, cfg.p4_device_config, cfg.cookie.cookie)
        return _M("p4.v1.SetForwardingPipelineConfigResponse")()

    def _build(self, p4info: Any, source: bytes) -> tuple[Any, ForwardingDevice]:
        """Compile the device config and check the P4Info describes it (same ids, names, fields)."""
        from p4.switch.pipeline_adapter import load_pipeline

        try:
            text = source.decode("utf-8")
        except UnicodeDecodeError:
            raise RpcError("INVALID_ARGUMENT", "p4_device_config: expected the P4_16 program's source as UTF-8 "
                                               "text") from None
        if not text.strip():
            raise RpcError("INVALID_ARGUMENT", "p4_device_config is empty: it must hold the P4_16 program source")
        name = p4info.pkg_info.name or "program"
        with tempfile.TemporaryDirectory(prefix="starpulse-p4rt-") as tmp:
            path = Path(tmp) / f"{''.join(c if c.isalnum() else '_' for c in name)}.p4"
            path.write_text(text, encoding="utf-8")
            try:
                sp = load_pipeline(path, device_id=self.device_id, clock=self.switch.clock)
            except P4Error as exc:
                raise RpcError("INVALID_ARGUMENT", f"p4_device_config does not compile: {exc}") from None
        device = ForwardingDevice(sp.pipe)
        diff = p4info_difference(device.p4info, p4info)
        if diff:
            raise RpcError("INVALID_ARGUMENT", f"the P4Info does not describe the device config's program: {diff}")
        return sp, device

    def _commit(self, sp: Any, device: ForwardingDevice, source: bytes, cookie: int) -> None:
        def swap() -> None:
            if self.switch.tm.queued_pkts:
                raise RpcError("UNAVAILABLE", "packets are queued in the switch; retry once they have left")
            self.switch.replace_pipeline(sp)
        self.calls.call(swap)
        with self._digest_lock:            # the old pipeline's digests and their lists are gone with it
            self._digest_bufs.clear()
            self._unacked.clear()
            self._lists.clear()
            self.device, self.device_config, self.cookie = device, source, cookie

    def get_pipeline(self, req: Any, context: grpc.ServicerContext) -> Any:
        if req.device_id != self.device_id:
            raise RpcError("NOT_FOUND", f"device {req.device_id}: this switch is device {self.device_id}")
        resp = _M("p4.v1.GetForwardingPipelineConfigResponse")()
        rtype = req.response_type
        names = {enum_value(_RESPONSE_TYPE, n): n for n in ("ALL", "COOKIE_ONLY", "P4INFO_AND_COOKIE",
                                                             "DEVICE_CONFIG_AND_COOKIE")}
        cfg = resp.config
        cfg.cookie.cookie = self.cookie
        if names.get(rtype) in ("ALL", "P4INFO_AND_COOKIE"):
            cfg.p4info.CopyFrom(self.device.p4info)
        if names.get(rtype) in ("ALL", "DEVICE_CONFIG_AND_COOKIE"):
            cfg.p4_device_config = self.device_config
        return resp

    # --- write / read ----------------------------------------------------------------------------------------
    def write(self, req: Any, context: grpc.ServicerContext) -> Any:
        self._check_primary(req.device_id, req.election_id, req.role)
        if req.atomicity not in _ATOMICITIES:
            raise RpcError("INVALID_ARGUMENT", f"atomicity {req.atomicity} is not one of P4Runtime's")
        all_or_none = req.atomicity != _ATOMICITY_CONTINUE
        device = self.device

        def apply() -> list[tuple[str, str]]:
            """The batch in the switch's loop, between packets (so DATAPLANE_ATOMIC holds for every mode);
            ROLLBACK_ON_ERROR and DATAPLANE_ATOMIC stop at the first failure and undo the ones before it."""
            restore = device.checkpoint() if all_or_none else None
            results: list[tuple[str, str]] = []
            for update in req.updates:
                try:
                    denied = self._write_allowed(req.role, update.entity)
                    if denied:
                        raise EntityError("PERMISSION_DENIED", denied)
                    device.write(update)
                    results.append(("OK", ""))
                except EntityError as exc:
                    results.append((exc.code, str(exc)))
                    if restore is not None:
                        restore()
                        undone = "not applied: an update of this all-or-none batch failed"
                        results = [(c, m) if c != "OK" else ("ABORTED", undone) for c, m in results]
                        results += [("ABORTED", undone)] * (len(req.updates) - len(results))
                        break
            return results

        results = self.calls.call(apply)
        failed = [r for r in results if r[0] != "OK"]
        if failed:
            status = _M("google.rpc.Status")()
            status.code = code_number("UNKNOWN")
            status.message = f"{len(failed)} of {len(results)} updates failed: {failed[0][1]}"
            for code, message in results:
                err = _M("p4.v1.Error")()
                err.canonical_code, err.message = code_number(code), message
                status.details.add().Pack(err)
            raise RpcError("UNKNOWN", status.message, status.SerializeToString())
        return _M("p4.v1.WriteResponse")()

    def read(self, req: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        if req.device_id != self.device_id:
            raise RpcError("NOT_FOUND", f"device {req.device_id}: this switch is device {self.device_id}")
        device = self.device

        def collect() -> list[Any]:
            out = []
            for ent in req.entities:
                out.extend(device.read(ent))
            return out

        try:
            entities = self.calls.call(collect)
        except EntityError as exc:
            raise RpcError(exc.code, str(exc)) from None
        resp = _M("p4.v1.ReadResponse")()
        resp.entities.extend(entities)
        yield resp

    def capabilities(self, req: Any, context: grpc.ServicerContext) -> Any:
        resp = _M("p4.v1.CapabilitiesResponse")()
        resp.p4runtime_api_version = metadata.version("p4runtime")
        return resp

    def close(self) -> None:
        self._closed.set()
        self.calls.close()


def p4info_difference(ours: Any, theirs: Any) -> str:
    """'' when ``theirs`` names the same objects with the same ids, fields and params as ``ours``; else the first
    difference in words."""
    def symbols(info: Any) -> dict[tuple[str, int], tuple]:
        out: dict[tuple[str, int], tuple] = {}
        for t in info.tables:
            out[("table", t.preamble.id)] = (t.preamble.name, tuple(
                (f.id, f.name, f.bitwidth, f.match_type) for f in t.match_fields), tuple(r.id for r in t.action_refs))
        for a in info.actions:
            out[("action", a.preamble.id)] = (a.preamble.name, tuple((p.id, p.name, p.bitwidth) for p in a.params))
        for kind in ("action_profiles", "counters", "direct_counters", "meters", "direct_meters", "registers",
                     "digests", "value_sets", "controller_packet_metadata"):
            for o in getattr(info, kind):
                out[(kind, o.preamble.id)] = (o.preamble.name,)
        return out

    a, b = symbols(ours), symbols(theirs)
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            kind, oid = key
            if key not in b:
                return f"it lacks {kind} {a[key][0]} (id {oid})"
            if key not in a:
                return f"the program has no {kind} with id {oid} ({b[key][0]})"
            return f"{kind} id {oid}: the program's {a[key]} differs from the P4Info's {b[key]}"
    return ""


def _abort(context: grpc.ServicerContext, err: RpcError) -> None:
    if err.details is not None:
        context.set_trailing_metadata((("grpc-status-details-bin", err.details),))
    context.abort(getattr(grpc.StatusCode, err.code), err.message)


def _guard(fn: Callable[[Any, grpc.ServicerContext], Any]) -> Callable[[Any, grpc.ServicerContext], Any]:
    """Turn ``RpcError`` into a gRPC status; any other exception into INTERNAL with its text."""
    def handler(req: Any, context: grpc.ServicerContext) -> Any:
        try:
            return fn(req, context)
        except RpcError as exc:
            _abort(context, exc)
        except EntityError as exc:
            _abort(context, RpcError(exc.code, str(exc)))
    return handler


def _guard_stream(fn: Callable[[Any, grpc.ServicerContext], Iterator[Any]]
                  ) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
    def handler(req: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        try:
            yield from fn(req, context)
        except RpcError as exc:
            _abort(context, exc)
    return handler


class P4RuntimeServer:
    """The gRPC server on ``address`` (``host:port`` or ``unix:PATH``) serving ``P4RuntimeService``."""

    def __init__(self, switch: EmbeddedSwitch, address: str, device_config: bytes) -> None:
        self.service = svc = P4RuntimeService(switch, device_config)

        def unary(fn: Callable, req: str, resp: str) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                _guard(fn), request_deserializer=_M(req).FromString, response_serializer=_M(resp).SerializeToString)

        handlers = {
            "Write": unary(svc.write, "p4.v1.WriteRequest", "p4.v1.WriteResponse"),
            "SetForwardingPipelineConfig": unary(svc.set_pipeline, "p4.v1.SetForwardingPipelineConfigRequest",
                                                 "p4.v1.SetForwardingPipelineConfigResponse"),
            "GetForwardingPipelineConfig": unary(svc.get_pipeline, "p4.v1.GetForwardingPipelineConfigRequest",
                                                 "p4.v1.GetForwardingPipelineConfigResponse"),
            "Capabilities": unary(svc.capabilities, "p4.v1.CapabilitiesRequest", "p4.v1.CapabilitiesResponse"),
            "Read": grpc.unary_stream_rpc_method_handler(
                _guard_stream(svc.read), request_deserializer=_M("p4.v1.ReadRequest").FromString,
                response_serializer=_M("p4.v1.ReadResponse").SerializeToString),
            "StreamChannel": grpc.stream_stream_rpc_method_handler(
                svc.stream_channel, request_deserializer=_M("p4.v1.StreamMessageRequest").FromString,
                response_serializer=_M("p4.v1.StreamMessageResponse").SerializeToString),
        }
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="p4rt"),
                                  options=[("grpc.so_reuseport", 0)])   # a port in use is an error, not shared
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        try:
            bound = self.server.add_insecure_port(address)
        except RuntimeError as exc:
            raise GrpcAddressError(f"--grpc-port: cannot listen on {address}: {exc}") from None
        if not bound:
            raise GrpcAddressError(f"--grpc-port: cannot listen on {address} (in use?)")
        self.address = address
        self.server.start()

    def close(self) -> None:
        self.server.stop(grace=None)
        self.service.close()

"""The P4Runtime gRPC server in a switch (no namespaces: a CPU port only): PacketOut/PacketIn through the
program's @controller_header headers, digests once enabled, a second controller as backup, Capabilities, and bad
pipeline configs."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import grpc
import pytest

from p4.p4runtime_proto import message_class
from p4.runtime.client import P4RuntimeClient, table_entry
from p4.runtime.entities import code_number
from p4.runtime.server import P4RuntimeServer
from p4.switch.pipeline_adapter import load_pipeline
from p4.switch.switch import EmbeddedSwitch, SwitchConfig

pytestmark = pytest.mark.unit

CPU_PORT = 64
PROGRAM = """#include <core.p4>
#include <v1model.p4>
@controller_header("packet_in") header packet_in_h { bit<9> ingress_port; bit<7> _pad; }
@controller_header("packet_out") header packet_out_h { bit<9> egress_port; bit<7> _pad; }
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers { packet_in_h pin; packet_out_h pout; eth_t eth; }
struct metadata { }
struct learn_t { bit<48> src; bit<9> port; }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { transition select(sm.ingress_port) { 64: cpu; default: eth; } }
    state cpu { pkt.extract(hdr.pout); transition eth; }
    state eth { pkt.extract(hdr.eth); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        if (hdr.pout.isValid()) {        // echo: back to the CPU, saying which port the controller asked for
            hdr.pin.setValid();
            hdr.pin.ingress_port = hdr.pout.egress_port;
            hdr.pin._pad = 0;
            hdr.pout.setInvalid();
            hdr.eth.type = hdr.eth.type + 1;
        }
        sm.egress_spec = 64;
        digest<learn_t>(1, {hdr.eth.src, sm.ingress_port});
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.pin); pkt.emit(hdr.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@contextlib.contextmanager
def serve(tmp_path: Path, program: str, cpu_port: int | None = None) -> Iterator[tuple[str, P4RuntimeServer]]:
    """``program`` on a switch (no interfaces) running its loop, with P4Runtime on a Unix socket: (address,
    server); all stopped on exit."""
    prog = tmp_path / "prog.p4"
    prog.write_text(program)
    switch = EmbeddedSwitch(load_pipeline(prog), SwitchConfig(interfaces=[], cpu_port=cpu_port))
    address = f"unix:{tmp_path}/p4rt.sock"
    server = P4RuntimeServer(switch, address, prog.read_bytes())
    loop = threading.Thread(target=switch.run, daemon=True)
    loop.start()
    try:
        yield address, server
    finally:
        server.close()
        switch.stop()
        loop.join(timeout=10)
        switch.close()


def controller_headers(info: object) -> tuple:
    """The P4Info's packet_out and packet_in controller headers."""
    by_name = {c.preamble.name: c for c in info.controller_packet_metadata}
    return by_name["packet_out"], by_name["packet_in"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, P4RuntimeServer]]:
    with serve(tmp_path, PROGRAM, CPU_PORT) as got:
        yield got


def test_packet_out_and_packet_in_carry_the_controller_headers(served) -> None:
    address, _ = served
    frame = bytes.fromhex("020000000002" "020000000001" "0800") + b"payload"
    with P4RuntimeClient(address, election_id=3) as ctl, P4RuntimeClient(address, election_id=2) as backup:
        assert ctl.arbitrate().status.code == code_number("OK")
        assert backup.arbitrate().status.code == code_number("ALREADY_EXISTS")
        info = ctl.get_pipeline().p4info
        pout, pin = controller_headers(info)
        ctl.packet_out(frame, {pout.metadata[0].id: 7})
        msg = ctl.next_stream_message(timeout_s=10)
        assert msg.WhichOneof("update") == "packet"
        assert msg.packet.payload == frame[:12] + b"\x08\x01" + b"payload"       # the program's +1 on the type
        meta = {m.metadata_id: m.value for m in msg.packet.metadata}
        assert meta == {pin.metadata[0].id: b"\x07", pin.metadata[1].id: b"\x00"}
        backup.packet_out(frame, {pout.metadata[0].id: 5})
        err = backup.next_stream_message(timeout_s=10)
        assert err.error.canonical_code == code_number("PERMISSION_DENIED")
        assert err.error.packet_out.packet_out.payload == frame
        assert ctl.capabilities() == metadata.version("p4runtime")      # the schema served is that package's


def test_bad_pipeline_configs_are_invalid_argument(served, tmp_path: Path) -> None:
    address, _ = served
    with P4RuntimeClient(address, election_id=1) as ctl:
        ctl.arbitrate()
        info = ctl.get_pipeline().p4info
        with pytest.raises(grpc.RpcError) as broken:
            ctl.set_pipeline(info, b"control nope {")
        assert broken.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "does not compile" in \
            broken.value.details()
        other = type(info)()
        other.CopyFrom(info)
        other.controller_packet_metadata[0].preamble.id += 1
        with pytest.raises(grpc.RpcError) as mismatch:
            ctl.set_pipeline(other, PROGRAM.encode())
        assert mismatch.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "does not describe" in mismatch.value.details()
        ctl.set_pipeline(info, PROGRAM.encode(), action="VERIFY")
    with P4RuntimeClient(address, device_id=9, election_id=1) as stranger:
        with pytest.raises(grpc.RpcError) as nf:
            stranger.arbitrate()
        assert nf.value.code() == grpc.StatusCode.NOT_FOUND


def test_digests_reach_the_primary_once_enabled(served) -> None:
    address, _ = served
    frame = bytes.fromhex("020000000002" "0200000000aa" "0800") + b"x"
    with P4RuntimeClient(address, election_id=1) as ctl:
        ctl.arbitrate()
        info = ctl.get_pipeline().p4info
        (digest,) = info.digests
        ctl.packet_out(frame, {1: 3})                      # not enabled: only the packet comes back
        assert ctl.next_stream_message(timeout_s=10).WhichOneof("update") == "packet"
        enable = message_class("p4.v1.Entity")()
        enable.digest_entry.digest_id = digest.preamble.id
        enable.digest_entry.config.max_list_size = 1
        ctl.write([("INSERT", enable)])
        ctl.packet_out(frame, {1: 3})
        got = {}
        for _ in range(2):
            msg = ctl.next_stream_message(timeout_s=10)
            got[msg.WhichOneof("update")] = msg
        dl = got["digest"].digest
        assert dl.digest_id == digest.preamble.id and len(dl.data) == 1 and dl.timestamp > 0
        src, port = (m.bitstring for m in dl.data[0].struct.members)
        assert src == bytes.fromhex("0200000000aa") and port == bytes([CPU_PORT])
        (read,) = ctl.read([message_class("p4.v1.Entity")(digest_entry=message_class("p4.v1.DigestEntry")())])
        assert read.digest_entry.config.max_list_size == 1


def test_digest_lists_batch_by_size_and_timeout_and_hold_duplicates_until_acked(served) -> None:
    address, _ = served

    def frame(src: int) -> bytes:
        return bytes.fromhex("020000000002") + src.to_bytes(6, "big") + bytes.fromhex("0800")

    def digests(ctl: P4RuntimeClient, n_packets: int) -> list:
        """The stream messages of ``n_packets`` echoed PacketOuts: their digest lists, in order."""
        lists, packets = [], 0
        while packets < n_packets or not lists:
            msg = ctl.next_stream_message(timeout_s=10)
            if msg.WhichOneof("update") == "packet":
                packets += 1
            else:
                lists.append(msg.digest)
        return lists

    with P4RuntimeClient(address, election_id=1) as ctl:
        ctl.arbitrate()
        (digest,) = ctl.get_pipeline().p4info.digests
        enable = message_class("p4.v1.Entity")()
        enable.digest_entry.digest_id = digest.preamble.id
        cfg = enable.digest_entry.config
        cfg.max_list_size, cfg.max_timeout_ns, cfg.ack_timeout_ns = 3, 60 * 10**9, 60 * 10**9
        ctl.write([("INSERT", enable)])
        for src in (0xA1, 0xA2, 0xA2, 0xA3):                 # the repeated A2 is one digest of the list
            ctl.packet_out(frame(src), {1: 3})
        (dl,) = digests(ctl, 4)
        assert [m.struct.members[0].bitstring[-1] for m in dl.data] == [0xA1, 0xA2, 0xA3]
        cfg.max_list_size, cfg.max_timeout_ns = 0, 300 * 10**6  # no size limit: 0.3 s after the first
        ctl.write([("MODIFY", enable)])
        for src in (0xB1, 0xB2, 0xA1):                        # A1 is in a list not acked yet: held back
            ctl.packet_out(frame(src), {1: 3})
        (timed,) = digests(ctl, 3)
        assert [m.struct.members[0].bitstring[-1] for m in timed.data] == [0xB1, 0xB2]
        ctl.digest_ack(dl.digest_id, dl.list_id)              # acked: A1 may come again
        ctl.packet_out(frame(0xA1), {1: 3})
        (again,) = digests(ctl, 1)
        assert [m.struct.members[0].bitstring[-1] for m in again.data] == [0xA1]
        assert again.list_id > timed.list_id > dl.list_id


IDLE_PROGRAM = """#include <core.p4>
#include <v1model.p4>
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers { eth_t eth; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    action fwd(bit<9> port) { sm.egress_spec = port; }
    table learned { key = { hdr.eth.dst: exact; } actions = { fwd; NoAction; } support_timeout = true;
                    default_action = NoAction(); }
    apply { learned.apply(); }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.eth); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def test_idle_timeouts_notify_the_controller_once_per_idle_spell(tmp_path: Path) -> None:
    with serve(tmp_path, IDLE_PROGRAM) as (address, server), P4RuntimeClient(address, election_id=1) as ctl:
        def hit(mac: int) -> None:
            """A packet to ``mac`` through the pipeline, in the switch's own loop."""
            pipe = server.service.switch.pipeline.pipe
            server.service.calls.call(lambda: pipe.process(0, mac.to_bytes(6, "big") + bytes(8)))

        ctl.arbitrate()
        info = ctl.get_pipeline().p4info
        idle, forever = (table_entry(info, "I.learned", {"hdr.eth.dst": mac}, "I.fwd", {"port": 1})
                         for mac in (0x0A, 0x0B))
        idle.table_entry.idle_timeout_ns = 300_000_000         # 0x0B: no timeout, never reported
        ctl.write([("INSERT", idle), ("INSERT", forever)])
        note = ctl.next_stream_message(timeout_s=10).idle_timeout_notification
        assert [e.match[0].exact.value[-1] for e in note.table_entry] == [0x0A] and note.timestamp > 0
        assert note.table_entry[0].idle_timeout_ns == 300_000_000
        read = message_class("p4.v1.Entity")()
        read.table_entry.CopyFrom(idle.table_entry)
        read.table_entry.ClearField("action")
        read.table_entry.time_since_last_hit.SetInParent()
        (got,) = ctl.read([read])
        assert got.table_entry.time_since_last_hit.elapsed_ns >= 300_000_000
        with pytest.raises(queue.Empty):                       # once per idle spell
            ctl.next_stream_message(timeout_s=0.6)
        hit(0x0A)                                              # hit: idle again 0.3 s later, told again
        again = ctl.next_stream_message(timeout_s=10).idle_timeout_notification
        assert [e.match[0].exact.value[-1] for e in again.table_entry] == [0x0A]
        assert again.timestamp - note.timestamp >= 600_000_000
        no_support = message_class("p4.v1.Entity")()
        no_support.table_entry.CopyFrom(forever.table_entry)
        no_support.table_entry.idle_timeout_ns = 5
        ctl.write([("MODIFY", no_support)])                    # the table supports it: accepted


@pytest.mark.parametrize(("atomicity", "kept"), [("CONTINUE_ON_ERROR", 2), ("ROLLBACK_ON_ERROR", 0),
                                                 ("DATAPLANE_ATOMIC", 0)])
def test_write_atomicity_continue_or_all_or_none(tmp_path: Path, atomicity: str, kept: int) -> None:
    with serve(tmp_path, IDLE_PROGRAM) as (address, _), P4RuntimeClient(address, election_id=1) as ctl:
        ctl.arbitrate()
        info = ctl.get_pipeline().p4info
        a, b = (table_entry(info, "I.learned", {"hdr.eth.dst": mac}, "I.fwd", {"port": 1}) for mac in (1, 2))
        with pytest.raises(grpc.RpcError) as failed:
            ctl.write([("INSERT", a), ("INSERT", a), ("INSERT", b)], atomicity=atomicity)
        status = message_class("google.rpc.Status").FromString(
            dict(failed.value.trailing_metadata())["grpc-status-details-bin"])
        errors = []
        for d in status.details:
            err = message_class("p4.v1.Error")()
            d.Unpack(err)
            errors.append(err.canonical_code)
        want = ["OK", "ALREADY_EXISTS", "OK"] if kept else ["ABORTED", "ALREADY_EXISTS", "ABORTED"]
        assert errors == [code_number(c) for c in want]
        read = message_class("p4.v1.Entity")()
        read.table_entry.table_id = info.tables[0].preamble.id
        assert len(ctl.read([read])) == kept


def test_roles_arbitrate_apart_and_each_primary_writes_and_hears(served) -> None:
    address, _ = served
    frame = bytes.fromhex("020000000002" "020000000001" "0800") + b"r"
    with P4RuntimeClient(address, election_id=5) as default, \
            P4RuntimeClient(address, election_id=1, role="monitor") as mon, \
            P4RuntimeClient(address, election_id=2, role="monitor") as mon2:
        assert default.arbitrate().status.code == code_number("OK")
        assert mon.arbitrate().status.code == code_number("OK")        # election id 1 is primary in its role
        got = mon2.arbitrate()
        assert got.status.code == code_number("OK") and got.role.name == "monitor"
        demoted = mon.next_stream_message(timeout_s=10).arbitration      # its role's primary changed: told
        assert demoted.status.code == code_number("ALREADY_EXISTS") and demoted.election_id.low == 2
        group = message_class("p4.v1.Entity")()
        group.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = 3
        mon2.write([("INSERT", group)])                                # a role's primary writes
        with pytest.raises(grpc.RpcError) as backup:
            mon.write([("DELETE", group)])
        assert backup.value.code() == grpc.StatusCode.PERMISSION_DENIED and "role 'monitor'" in \
            backup.value.details()
        default.packet_out(frame, {1: 1})
        for ctl in (default, mon2):                                    # a PacketIn reaches each role's primary
            assert ctl.next_stream_message(timeout_s=10).WhichOneof("update") == "packet"
        with pytest.raises(queue.Empty):
            mon.next_stream_message(timeout_s=0.3)


def test_role_configs_limit_writes_pipeline_pushes_packet_ins_and_digests(served) -> None:
    # role "learn" may write (and hear) the digest only: no PRE writes, no pipeline, no PacketIns
    address, _ = served
    frame = bytes.fromhex("020000000002" "0200000000aa" "0800") + b"x"
    P4RoleConfig = message_class("stratum.P4RoleConfig")
    with P4RuntimeClient(address, election_id=5) as default:
        default.arbitrate()
        info = default.get_pipeline().p4info
        did = info.digests[0].preamble.id
        with P4RuntimeClient(address, election_id=1, role="learn",
                             role_config=P4RoleConfig(exclusive_p4_ids=[did])) as learn:
            assert learn.arbitrate().status.code == code_number("OK")
            group = message_class("p4.v1.Entity")()
            group.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = 3
            with pytest.raises(grpc.RpcError) as pre:
                learn.write([("INSERT", group)])
            assert pre.value.code() == grpc.StatusCode.UNKNOWN and "packet replication engine" in pre.value.details()
            with pytest.raises(grpc.RpcError) as push:
                learn.set_pipeline(info, b"x")
            assert push.value.code() == grpc.StatusCode.PERMISSION_DENIED and "can_push_pipeline" in \
                push.value.details()
            enable = message_class("p4.v1.Entity")()
            enable.digest_entry.digest_id = did
            enable.digest_entry.config.max_list_size = 1
            learn.write([("INSERT", enable)])                          # its own object: allowed
            default.packet_out(frame, {1: 3})
            got = {learn.next_stream_message(timeout_s=10).WhichOneof("update")}
            with pytest.raises(queue.Empty):                           # the digest only, no PacketIn
                learn.next_stream_message(timeout_s=0.3)
            assert got == {"digest"}
            assert {default.next_stream_message(timeout_s=10).WhichOneof("update") for _ in range(2)} == {
                "packet", "digest"}                                    # the default role has the whole switch
            with P4RuntimeClient(address, election_id=1, role="other",
                                 role_config=P4RoleConfig(shared_p4_ids=[did])) as other:
                with pytest.raises(grpc.RpcError) as clash:
                    other.arbitrate()
                    other.next_stream_message(timeout_s=10)
                assert clash.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "exclusive" in \
                    clash.value.details()


def test_the_default_role_takes_no_role_config(served) -> None:
    address, _ = served
    cfg = message_class("stratum.P4RoleConfig")(can_push_pipeline=True)
    with P4RuntimeClient(address, election_id=1, role_config=cfg) as ctl:
        with pytest.raises(grpc.RpcError) as err:
            ctl.arbitrate()
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "default role" in err.value.details()


def test_role_config_packet_in_filter_passes_only_matching_packet_ins(served) -> None:
    address, _ = served
    frame = bytes.fromhex("020000000002" "020000000001" "0800") + b"f"
    with P4RuntimeClient(address, election_id=5) as default:
        default.arbitrate()
        pout, pin = controller_headers(default.get_pipeline().p4info)
        cfg = message_class("stratum.P4RoleConfig")(receives_packet_ins=True)
        cfg.packet_in_filter.metadata_id, cfg.packet_in_filter.value = pin.metadata[0].id, b"\x07"
        with P4RuntimeClient(address, election_id=1, role="cpu7", role_config=cfg) as cpu7:
            cpu7.arbitrate()
            for port in (5, 7):                   # the program echoes the asked port into packet_in.ingress_port
                default.packet_out(frame, {pout.metadata[0].id: port})
                assert default.next_stream_message(timeout_s=10).WhichOneof("update") == "packet"
            msg = cpu7.next_stream_message(timeout_s=10)
            assert {m.metadata_id: m.value for m in msg.packet.metadata}[pin.metadata[0].id] == b"\x07"
            with pytest.raises(queue.Empty):
                cpu7.next_stream_message(timeout_s=0.3)

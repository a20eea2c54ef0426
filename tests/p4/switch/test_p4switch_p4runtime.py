"""P4Runtime against the switch process between hosts in namespaces: a raw-gRPC client (``p4.runtime.client``)
arbitrates, sets the pipeline (tutorials' basic.p4 with the P4Info ``p4 check --p4runtime-files`` writes), writes
LPM entries and the default action, and the hosts' packets follow them; entries read back; bad writes fail with
per-update errors.  (The PyPI clients p4runtime-shell and finsy do not install under the project's protobuf pin.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from switchlab import host_ip, host_mac, tshark_fields

from p4.p4runtime_proto import message_class, text_format
from p4.runtime.client import P4RuntimeClient, decode_write_errors, table_entry
from p4.runtime.entities import code_number

pytestmark = pytest.mark.emu

BASIC_P4 = Path(__file__).resolve().parents[3] / "p4" / "programs" / "basic.p4"
SWITCH_MAC = "02:00:00:00:00:fe"
TABLE, FWD = "MyIngress.ipv4_lpm", "MyIngress.ipv4_forward"
DST = "hdr.ipv4.dstAddr"


def ip_int(text: str) -> int:
    return int.from_bytes(bytes(int(x) for x in text.split(".")), "big")


def mac_int(text: str) -> int:
    return int(text.replace(":", ""), 16)


def udp(src: int, dst_ip: str, seq: int) -> bytes:
    return bytes(Ether(src=host_mac(src), dst=SWITCH_MAC) / IP(src=host_ip(src), dst=dst_ip, ttl=64, id=seq)
                 / UDP(sport=40000, dport=5000) / bytes(30))


def udp_only(frames: list[bytes]) -> list[bytes]:
    return [f for f in frames if len(f) >= 38 and f[12:14] == b"\x08\x00" and f[23] == 17]


def route(info: object, dst: str, plen: int, port: int) -> object:
    """An LPM entry of basic.p4's table sending ``dst/plen`` to host ``port`` (by its MAC)."""
    return table_entry(info, TABLE, {DST: (ip_int(dst), plen)}, FWD, {"dstAddr": mac_int(host_mac(port)),
                                                                       "port": port})


def test_p4runtime_client_programs_the_switch(switch_lab, tmp_path) -> None:
    lab = switch_lab
    info_file = tmp_path / "basic.p4info.txtpb"
    subprocess.run([sys.executable, "-m", "sw.cli", "p4", "check", str(BASIC_P4), "--p4runtime-files",
                    str(info_file)], check=True, capture_output=True)
    info = text_format.Parse(info_file.read_text(), message_class("p4.config.v1.P4Info")())
    address = f"unix:{tmp_path}/p4rt.sock"
    lab.start(BASIC_P4, "--grpc-port", address)
    with P4RuntimeClient(address, election_id=10) as ctl, P4RuntimeClient(address, election_id=5) as backup:
        assert ctl.arbitrate().status.code == code_number("OK")
        arb = backup.arbitrate()
        assert arb.status.code == code_number("ALREADY_EXISTS") and arb.election_id.low == 10
        with pytest.raises(grpc.RpcError) as denied:
            backup.write([("INSERT", route(info, "10.0.2.2", 32, 2))])
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED

        ctl.set_pipeline(info, BASIC_P4.read_bytes())
        assert ctl.get_pipeline().p4info == info
        ctl.write([("INSERT", route(info, "10.0.2.2", 32, 2)), ("INSERT", route(info, "10.0.3.0", 24, 3))])
        lab.send(1, [udp(1, "10.0.2.2", i) for i in range(5)] + [udp(1, "10.0.3.7", 10 + i) for i in range(4)]
                 + [udp(1, "10.9.9.9", 20)])
        at2, at3 = udp_only(lab.recv(2, want=5)), udp_only(lab.recv(3, want=4))
        assert len(at2) == 5 and len(at3) == 4
        assert all(Ether(f).dst == host_mac(2) and IP(f[14:]).ttl == 63 for f in at2)
        assert [IP(f[14:]).id for f in at3] == [10, 11, 12, 13]
        assert udp_only(lab.recv(4, quiet_s=0.3)) == []          # 10.9.9.9: the default action drops it

        got = ctl.read([message_class("p4.v1.Entity")(table_entry=message_class("p4.v1.TableEntry")())])
        assert sorted(e.SerializeToString() for e in got) == sorted(
            route(info, d, p, n).SerializeToString() for d, p, n in (("10.0.2.2", 32, 2), ("10.0.3.0", 24, 3)))

        bad = table_entry(info, TABLE, {DST: (ip_int("10.0.5.1"), 16)}, FWD, {"dstAddr": 1, "port": 1})
        with pytest.raises(grpc.RpcError) as failed:
            ctl.write([("MODIFY", route(info, "10.0.3.0", 24, 4)), ("INSERT", bad),
                       ("INSERT", route(info, "10.0.2.2", 32, 2))])
        assert failed.value.code() == grpc.StatusCode.UNKNOWN             # the spec's code for a failed batch
        errors = decode_write_errors(failed.value)
        assert [c for c, _ in errors] == [code_number(n) for n in ("OK", "INVALID_ARGUMENT", "ALREADY_EXISTS")]
        assert "beyond the /16 prefix" in errors[1][1]

        ctl.write([("MODIFY", table_entry(info, TABLE, action=FWD, params={"dstAddr": mac_int(host_mac(4)),
                                                                          "port": 4}, default=True)),
                   ("DELETE", route(info, "10.0.2.2", 32, 2))])
        lab.send(1, [udp(1, "10.0.2.2", 30), udp(1, "10.0.3.9", 31), udp(1, "10.9.9.9", 32)])
        at4 = udp_only(lab.recv(4, want=3))
        assert sorted(IP(f[14:]).id for f in at4) == [30, 31, 32]        # default action, modified entry
        assert udp_only(lab.recv(2, quiet_s=0.3)) == []
    assert lab.stop() == 0
    rows = tshark_fields(lab.pcap_dir / "p2_out.pcap", "eth.dst", "ip.ttl", "ip.dst", display_filter="udp")
    assert rows == [[host_mac(2), "63", "10.0.2.2"]] * 5

"""A p4runtime-shell session against a switch, run by .venv-p4rt-clients' Python (p4runtime-shell's own pins):
set the pipeline, insert two LPM entries and a default action, read them back, insert a duplicate.  Prints one
JSON object with what it saw.  argv: GRPC_ADDR P4INFO.txtpb PROG.p4"""

import json
import sys

import p4runtime_sh.shell as sh
from p4runtime_sh.p4runtime import P4RuntimeWriteException

addr, p4info, program = sys.argv[1:4]
sh.setup(device_id=0, grpc_addr=addr, election_id=(0, 1), config=sh.FwdPipeConfig(p4info, program))
out = {}
for dst, mac, port in (("10.0.2.2/32", "02:00:00:00:00:02", "2"), ("10.0.3.0/24", "02:00:00:00:00:03", "3")):
    te = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.ipv4_forward")
    te.match["hdr.ipv4.dstAddr"] = dst
    te.action["dstAddr"] = mac
    te.action["port"] = port
    te.insert()
default = sh.TableEntry("MyIngress.ipv4_lpm")(action="MyIngress.ipv4_forward", is_default=True)
default.action["dstAddr"] = "02:00:00:00:00:04"
default.action["port"] = "4"
default.modify()
out["read"] = sorted(f"{e.match['hdr.ipv4.dstAddr'].lpm.value.hex()}/{e.match['hdr.ipv4.dstAddr'].lpm.prefix_len}"
                     f"->{e.action['port'].value.hex()}" for e in sh.TableEntry("MyIngress.ipv4_lpm").read())
try:
    te.insert()
    out["duplicate"] = "accepted"
except P4RuntimeWriteException as exc:
    out["duplicate"] = [(e[0], e[1].canonical_code, e[1].message) for e in exc.errors] if hasattr(exc, "errors") \
        else str(exc)
sh.teardown()
print(json.dumps(out))

"""A finsy session against a switch, run by .venv-p4rt-finsy's Python (finsy's own pins): finsy arbitrates and sets
the pipeline, inserts two LPM entries, reads them back, inserts a duplicate.  Prints one JSON object with what it
saw.  argv: GRPC_ADDR P4INFO.txtpb PROG.p4"""

import asyncio
import json
import sys
from pathlib import Path

import finsy as fy

addr, p4info, program = sys.argv[1:4]


def route(dst: str, mac: str, port: int) -> fy.P4TableEntry:
    return fy.P4TableEntry("MyIngress.ipv4_lpm", match=fy.P4TableMatch(dstAddr=dst),
                           action=fy.P4TableAction("MyIngress.ipv4_forward", dstAddr=mac, port=port))


async def main() -> dict:
    out: dict = {}
    opts = fy.SwitchOptions(p4info=Path(p4info), p4blob=Path(program), device_id=0)
    async with fy.Switch("sw", addr, opts) as sw:
        await sw.write([+route("10.0.2.2/32", "02:00:00:00:00:02", 2), +route("10.0.3.0/24", "02:00:00:00:00:03", 3)])
        out["read"] = sorted([f"{e.match_dict(sw.p4info)['dstAddr']}->{e.action.args['port']}"
                              async for e in sw.read(fy.P4TableEntry("MyIngress.ipv4_lpm"))])
        try:
            await sw.write([+route("10.0.2.2/32", "02:00:00:00:00:02", 2)])
            out["duplicate"] = "accepted"
        except fy.P4ClientError as exc:
            out["duplicate"] = [(i, e.canonical_code.name, e.message) for i, e in exc.details.items()]
    return out


print(json.dumps(asyncio.run(main())))

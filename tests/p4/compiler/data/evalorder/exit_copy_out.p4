// `exit` inside an action or a control still copies out/inout arguments back (copy-out happens on exit).
// sel == 0: an action exits; sel == 1: an action exits inside another action; sel == 2: a sub-control exits.
#include <core.p4>
#include <v1model.p4>

header h_t {
    bit<8> sel;
    bit<8> o;      // out argument
    bit<8> io;     // inout argument
    bit<8> after;  // written after the exiting call: must stay as received
}
struct headers { h_t h; }
struct metadata { }

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }

control Sub(out bit<8> o, inout bit<8> io) {
    apply {
        o = 0x33;
        io = io + 3;
        exit;
    }
}

control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    Sub() sub;
    action set_and_exit(out bit<8> o, inout bit<8> io) {
        o = 0x11;
        io = io + 1;
        exit;
    }
    action outer(out bit<8> o, inout bit<8> io) {
        io = io + 1;
        set_and_exit(o, io);
        io = 0xEE;
    }
    apply {
        sm.egress_spec = 1;
        if (hdr.h.sel == 0) {
            set_and_exit(hdr.h.o, hdr.h.io);
        } else if (hdr.h.sel == 1) {
            outer(hdr.h.o, hdr.h.io);
        } else {
            sub.apply(hdr.h.o, hdr.h.io);
        }
        hdr.h.after = 0xFF;
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;

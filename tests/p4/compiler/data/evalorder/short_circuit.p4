// Evaluation order: `a || f(x)` / `a && f(x)` skip f when short-circuited; `c ? f(x) : g(y)` evaluates one arm.
// Each counter field counts how often its call ran; `a` (1 or not) picks which calls the semantics allow.
#include <core.p4>
#include <v1model.p4>

header h_t {
    bit<8> a;
    bit<8> n_or;    // bump() calls in `a == 1 || bump(..)`
    bit<8> n_and;   // bump() calls in `a == 1 && bump(..)`
    bit<8> n_then;  // calls of the ?: arm taken when a == 1
    bit<8> n_else;  // calls of the ?: arm taken otherwise
    bit<8> n_if;    // bump() calls in an if condition `a != 1 && bump(..)`
    bit<8> r;       // the ?: result
    bit<8> flags;   // bit 0: value of the ||, bit 1: value of the &&
}
struct headers { h_t h; }
struct metadata { }

bool bump(inout bit<8> n) {
    n = n + 1;
    return true;
}

bit<8> count(inout bit<8> n, in bit<8> result) {
    n = n + 1;
    return result;
}

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        bool x = hdr.h.a == 1 || bump(hdr.h.n_or);
        bool y = hdr.h.a == 1 && bump(hdr.h.n_and);
        hdr.h.r = hdr.h.a == 1 ? count(hdr.h.n_then, 8w0x7) : count(hdr.h.n_else, 8w0x9);
        if (hdr.h.a != 1 && bump(hdr.h.n_if)) {
            hdr.h.flags = hdr.h.flags | 8w0x4;
        }
        if (x) { hdr.h.flags = hdr.h.flags | 8w0x1; }
        if (y) { hdr.h.flags = hdr.h.flags | 8w0x2; }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;

// Evaluation order: in `v + f(v)` where f modifies v (inout), the left v is read before the call;
// likewise the arguments of a call: in `first(u, add10(u))` the first u is read before add10 runs.
#include <core.p4>
#include <v1model.p4>

header h_t {
    bit<8> v;      // a header field passed inout
    bit<8> r;      // v + add10(v)
    bit<8> w;      // compared with a call that changes it
    bit<8> eq;     // 1 if `w == add10(w)` compared the old w (never equal), else 2
    bit<8> local;  // the same sum on a local variable
    bit<8> u;      // passed to add10 as the second argument of first()
    bit<8> arg;    // first(u, add10(u)): the u read before the call
}
struct headers { h_t h; }
struct metadata { }

bit<8> add10(inout bit<8> x) {
    x = x + 10;
    return x;
}

bit<8> first(in bit<8> x, in bit<8> y) {
    return x;
}

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        hdr.h.r = hdr.h.v + add10(hdr.h.v);
        if (hdr.h.w == add10(hdr.h.w)) { hdr.h.eq = 2; } else { hdr.h.eq = 1; }
        bit<8> v = hdr.h.local;
        hdr.h.local = v + add10(v);
        hdr.h.arg = first(hdr.h.u, add10(hdr.h.u));
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;

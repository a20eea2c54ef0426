// Table keys whose P4Info names p4c generates (slices, stack elements, isValid()); ours, for tests/p4/p4info.
#include <core.p4>
#include <v1model.p4>
header h_t { bit<32> a; bit<8> b; }
struct H { h_t[2] s; h_t x; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) { state start { pkt.extract(hdr.x); transition accept; } }
control VC(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    action a() { }
    table t { key = { hdr.x.a[31:16] : exact; hdr.s[1].b : exact; hdr.x.isValid() : exact; } actions = { a; } }
    apply { t.apply(); }
}
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control CC(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.x); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;

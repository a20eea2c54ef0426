// A serializable enum as a table key and an action parameter: P4Info type_name and type_info (ours, for tests).
#include <core.p4>
#include <v1model.p4>
enum bit<8> Proto { TCP = 6, UDP = 17 }
header h_t { Proto p; bit<8> x; }
struct H { h_t h; }
struct M { }
parser P(packet_in pkt, out H hdr, inout M m, inout standard_metadata_t sm) { state start { pkt.extract(hdr.h); transition accept; } }
control VC(inout H hdr, inout M m) { apply { } }
control I(inout H hdr, inout M m, inout standard_metadata_t sm) {
    action set_proto(Proto p) { hdr.h.p = p; }
    table t { key = { hdr.h.p : exact; } actions = { set_proto; } }
    apply { t.apply(); }
}
control E(inout H hdr, inout M m, inout standard_metadata_t sm) { apply { } }
control CC(inout H hdr, inout M m) { apply { } }
control D(packet_out pkt, in H hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;

/* The STF runner's key-name test program: a validity key and a header-stack key (p4c's STF spellings
   hs$0.$valid$, hs$0.valid, hs$0.f), and a direct counter read back by an entry's '= ID' name. */
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> f; }

struct headers_t {
    h_t    first;
    h_t[2] hs;
}

struct meta_t { }

parser P(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.first);
        transition select(hdr.first.f) {
            0: accept;
            default: more;
        }
    }
    state more {
        pkt.extract(hdr.hs[0]);
        transition accept;
    }
}

control VC(inout headers_t hdr, inout meta_t meta) { apply { } }

control Ing(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    direct_counter(CounterType.packets_and_bytes) hits;

    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }

    table t {
        key = {
            hdr.hs[0].isValid(): exact;
            hdr.hs[0].f: ternary;
        }
        actions = { fwd; drop; }
        default_action = drop();
        counters = hits;
    }

    apply { t.apply(); }
}

control Eg(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }

control CC(inout headers_t hdr, inout meta_t meta) { apply { } }

control D(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.first);
        pkt.emit(hdr.hs);
    }
}

V1Switch(P(), VC(), Ing(), Eg(), CC(), D()) main;

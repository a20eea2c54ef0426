// Every P4Info section on one small v1model program (ours, for tests/p4/p4info).
#include <core.p4>
#include <v1model.p4>

@controller_header("packet_in")
header packet_in_h {
    bit<9> ingress_port;
    bit<7> _pad;
}

@controller_header("packet_out")
header packet_out_h {
    bit<9> egress_port;
    bit<7> _pad;
}

header ethernet_h {
    bit<48> dst;
    bit<48> src;
    bit<16> ether_type;
}

struct headers_t {
    packet_out_h packet_out;
    packet_in_h packet_in;
    ethernet_h ethernet;
}

struct learn_t {
    bit<48> src;
    bit<9> port;
}

struct meta_t {
    bit<32> color;
}

parser P(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    value_set<bit<16>>(4) special_types;
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            special_types: accept;
            default: accept;
        }
    }
}

control VC(inout headers_t hdr, inout meta_t meta) { apply { } }

control I(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    direct_counter(CounterType.packets_and_bytes) fwd_counter;
    direct_meter<bit<32>>(MeterType.bytes) fwd_meter;
    counter(64, CounterType.bytes) port_bytes;
    meter(16, MeterType.packets) port_meter;
    @id(0x77) register<int<16>>(8) signed_reg;

    @id(5) action fwd(bit<9> port) { sm.egress_spec = port; fwd_meter.read(meta.color); }
    @name(".ns.drop_all") action drop_all() { mark_to_drop(sm); }
    @name("renamed") action punt() { sm.egress_spec = 510; }

    table forward {
        key = { hdr.ethernet.dst : exact; hdr.ethernet.ether_type : ternary @name("etype"); }
        actions = { fwd; @defaultonly drop_all; @tableonly punt; }
        default_action = drop_all();
        counters = fwd_counter;
        meters = fwd_meter;
        support_timeout = true;
        size = 64;
    }
    table t1290 { key = { sm.ingress_port : exact; } actions = { fwd; } }
    table t4840 { key = { sm.ingress_port : exact; } actions = { fwd; } }
    @hidden table secret { actions = { drop_all; } default_action = drop_all(); }
    table consts {
        key = { sm.ingress_port : exact; }
        actions = { fwd; NoAction; }
        const default_action = fwd(3);
        const entries = { 1 : fwd(2); }
    }

    apply {
        port_bytes.count(0);
        bit<32> c;
        port_meter.execute_meter(0, c);
        signed_reg.write(0, 1);
        forward.apply();
        t1290.apply();
        t4840.apply();
        secret.apply();
        consts.apply();
        digest<learn_t>(1, { hdr.ethernet.src, sm.ingress_port });
    }
}

control E(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers_t hdr, inout meta_t meta) { apply { } }
control D(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.ethernet); } }

V1Switch(P(), VC(), I(), E(), CC(), D()) main;

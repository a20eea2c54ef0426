/* The STF runner's test program: a table per match kind, an indexed counter, a register, I2E clone, multicast.
   Frame: op(8) b(8) c(16) d(32) r(8) mac(48), 15 bytes; op picks what by_op does, the other tables write b. */
#include <core.p4>
#include <v1model.p4>

header data_t {
    bit<8>  op;
    bit<8>  b;
    bit<16> c;
    bit<32> d;
    bit<8>  r;
    bit<48> mac;
}

struct headers_t { data_t data; }
struct meta_t { }

parser P(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.data);
        transition accept;
    }
}

control VC(inout headers_t hdr, inout meta_t meta) { apply { } }

control Ing(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    counter(8, CounterType.packets_and_bytes) op_hits;
    register<bit<8>>(4) regs;

    action fwd(bit<9> port) { sm.egress_spec = port; }
    action drop() { mark_to_drop(sm); }
    action flood(bit<16> grp) { sm.mcast_grp = grp; }
    action mirror(bit<32> session, bit<9> port) {
        clone(CloneType.I2E, session);
        sm.egress_spec = port;
    }
    action read_reg(bit<32> index, bit<9> port) {
        regs.read(hdr.data.b, index);
        sm.egress_spec = port;
    }
    action set_b(bit<8> val, bit<9> port) {
        hdr.data.b = val;
        sm.egress_spec = port;
    }

    table by_op {
        key = { hdr.data.op: exact; }
        actions = { fwd; drop; flood; mirror; read_reg; }
        default_action = drop();
    }
    table by_c {
        key = { hdr.data.c: ternary; }
        actions = { set_b; NoAction; }
        default_action = NoAction();
    }
    table by_d {
        key = { hdr.data.d: lpm; }
        actions = { set_b; NoAction; }
        default_action = NoAction();
    }
    table by_r {
        key = { hdr.data.r: range; hdr.data.mac: exact; }
        actions = { set_b; NoAction; }
        default_action = NoAction();
    }

    apply {
        op_hits.count((bit<32>)hdr.data.op);
        by_op.apply();
        by_c.apply();
        by_d.apply();
        by_r.apply();
    }
}

control Eg(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }

control CC(inout headers_t hdr, inout meta_t meta) { apply { } }

control D(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.data); }
}

V1Switch(P(), VC(), Ing(), Eg(), CC(), D()) main;

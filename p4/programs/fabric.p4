/*
 * StarPulse fabric switch: L3 routing with LPM + ECMP, RED-style ECN marking, INT-MD (v2.1) telemetry.
 *
 * One program serves leaves and spines; the control plane (emu/control_plane.py) fills the tables from the topology.
 * Standard P4_16 for v1model: compiles with p4c for BMv2 simple_switch unchanged.
 *
 * IPv4 and IPv6 alike (RoCEv2 runs over both): routes per family (ipv4_lpm, ipv6_lpm) share the ECMP groups,
 * ECN marks the IPv6 traffic class as it does the IPv4 TOS byte.
 *
 * INT over UDP: a packet carries INT when its DSCP (IPv4 TOS or IPv6 traffic class, upper 6 bits) equals the
 * INT marker (set by the source switch, restored by the sink). The INT shim follows the UDP header, then the MD header, then a stack of per-hop metadata,
 * newest hop first. Instruction set used (INT v2.1 bitmap bits): 0 node id, 1 level-1 ingress/egress port ids,
 * 2 hop latency, 3 queue id + occupancy, 5 egress timestamp, 7 egress port tx utilization (carried as the
 * egress port's transmitted byte count mod 2^32, which is what HPCC needs) = 7 words per hop.
 * Lengths: IPv4 total length (and header checksum) or IPv6 payload length, and the UDP length, grow with the INT
 * bytes. UDP checksum: IPv4 sets it to 0 ("none", as RoCEv2 senders do); IPv6 must carry one (RFC 8200), so
 * every INT edit updates it incrementally (RFC 1624: HC' = ~(~HC + ~m + m'), one csum16 hash over ~HC and the
 * words added or removed); a zero IPv6 checksum (a sender that sent none) is left alone.
 *
 * Reports: the sink leaf (int_sink_config, by egress port toward a host) clones one INT packet in
 * report_every of each flow (a counter per UDP source port slot: RoCE derives the port from the QP pair; a hash
 * of the 5-tuple cost the software switch several times more per packet) to the collector's mirror session.
 * With strip = 1 (report mode) an ingress-to-egress clone carries the stack and the original loses it; with
 * strip = 0 (host mode, operations telemetry on) the original keeps it for the receiver, whose HPCC echo needs
 * it, and an egress-to-egress clone carries the stack as it leaves, the sink's own hop (the host port's queue
 * and latency) included.
 */
#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<16> ETHERTYPE_IPV6 = 0x86DD;
const bit<8>  PROTO_UDP = 17;
const bit<6>  DSCP_INT = 0x17;
const bit<16> INT_INSTRUCTIONS = 0xF500;   /* bits 0,1,2,3,5,7 counted from the MSB */
const bit<5>  INT_HOP_WORDS = 7;
const bit<8>  INT_SHIM_WORDS = 3;          /* shim (1 word) + MD header (3 words) counted in shim.len: 4 */
const bit<32> INT_HOP_BYTES = 28;
const bit<32> INT_HEADER_BYTES = 16;       /* shim 4 + MD 12 */
const bit<32> REPORT_MIRROR_SESSION = 250;
const bit<8>  MAX_INT_HOPS = 4;
const bit<8>  INT_REPORT_FIELDS = 1;      /* field list kept by the report clone: the INT source flag */
const bit<16> INT_ECHO_DOMAIN_ID = 0x4543; /* an INT echo (hops carried back to an HPCC sender): never reported */
/* per-flow report sampling: 1024 packet counters, by the low 10 bits of the UDP source port (int_report_seq) */
const bit<32> INSTANCE_EGRESS_CLONE = 2;   /* v1model instance_type of an egress-to-egress clone */
/* one's complement word deltas of the UDP checksum (IPv6): the UDP length counts twice (pseudo-header, header) */
const bit<16> CSUM_SOURCE_LEN = 32;        /* + 2 x 16 B of shim and MD header */
const bit<16> CSUM_TRANSIT = 62;           /* + 2 x 28 B of a hop, shim length + 7 words, hop count - 1 */
const bit<16> CSUM_E_BIT = 0x0400;         /* the MD header's E bit, set */

/* drop reasons, the index of the drop_reasons counter */
const bit<32> DROP_NO_ROUTE = 0;
const bit<32> DROP_TTL = 1;
const bit<32> DROP_PARSER = 2;
const bit<32> DROP_ACL = 3;

typedef bit<48> mac_addr_t;
typedef bit<32> ipv4_addr_t;
typedef bit<128> ipv6_addr_t;

header ethernet_t {
    mac_addr_t dst_addr;
    mac_addr_t src_addr;
    bit<16>    ether_type;
}

header ipv4_t {
    bit<4>      version;
    bit<4>      ihl;
    bit<6>      dscp;
    bit<2>      ecn;
    bit<16>     total_len;
    bit<16>     identification;
    bit<3>      flags;
    bit<13>     frag_offset;
    bit<8>      ttl;
    bit<8>      protocol;
    bit<16>     hdr_checksum;
    ipv4_addr_t src_addr;
    ipv4_addr_t dst_addr;
}

header ipv6_t {
    bit<4>      version;
    bit<6>      dscp;           /* traffic class, upper 6 bits */
    bit<2>      ecn;            /* traffic class, lower 2 bits */
    bit<20>     flow_label;
    bit<16>     payload_len;
    bit<8>      next_hdr;
    bit<8>      hop_limit;
    ipv6_addr_t src_addr;
    ipv6_addr_t dst_addr;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> len;
    bit<16> checksum;
}

/* INT v2.1 shim header for INT over TCP/UDP */
header int_shim_t {
    bit<4> type;        /* 1 = INT-MD */
    bit<2> npt;         /* 0 = original DSCP kept in the shim */
    bit<2> rsvd1;
    bit<8> len;         /* words of INT (shim + MD header + metadata stack) */
    bit<2> rsvd2;
    bit<6> orig_dscp;   /* with npt = 0: the DSCP the sink restores */
    bit<8> rsvd3;
}

/* INT v2.1 metadata (MD) header */
header int_md_t {
    bit<4>  ver;
    bit<1>  d;
    bit<1>  e;          /* max hop count exceeded */
    bit<1>  m;
    bit<12> rsvd1;
    bit<5>  hop_ml;     /* words per hop */
    bit<8>  remaining_hop_cnt;
    bit<16> instruction_mask;
    bit<16> domain_specific_id;
    bit<16> ds_instruction;
    bit<16> ds_flags;
}

header int_hop_t {
    bit<32> node_id;
    bit<16> ingress_port_id;
    bit<16> egress_port_id;
    bit<32> hop_latency;
    bit<8>  queue_id;
    bit<24> queue_occupancy;
    bit<64> egress_timestamp;
    bit<32> egress_tx_bytes;
}

struct headers_t {
    ethernet_t           ethernet;
    ipv4_t               ipv4;
    ipv6_t               ipv6;
    udp_t                udp;
    int_shim_t           int_shim;
    int_md_t             int_md;
    int_hop_t[MAX_INT_HOPS] int_hops;
}

struct metadata_t {
    bit<16> ecmp_group;
    bit<16> ecmp_size;
    bit<16> ecmp_index;
    bit<1>  ecmp_chosen;  /* the route is an ECMP group: ecmp_group picks the member */
    bit<8>  int_words_left;
    @field_list(1)   /* = INT_REPORT_FIELDS */
    bit<1>  int_source;
    bit<1>  int_sink_strip;
    bit<32> int_report_every; /* the sink clones one report per this many INT packets of a flow (0: none) */
    bit<32> int_report_slot;
    bit<32> int_report_seq;
    bit<1>  int_report;       /* this packet is the flow's sampled one: report it (E2E clone in host mode) */
    bit<32> node_id;
    bit<32> tx_bytes;
    bit<32> qdepth;
    bit<32> red_kmin;
    bit<32> red_kmax;
    bit<32> red_pmax;     /* marking probability at kmax, scaled to 2^16 */
    bit<32> red_random;
    bit<1>  ecn_capable;  /* ECT or CE in the IPv4 TOS / IPv6 traffic class */
    bit<1>  ecn_mark;
    bit<6>  dscp;         /* the packet's DSCP, either family */
    bit<16> csum_neg;     /* ~UDP checksum: the start of an incremental update */
    bit<16> csum_delta;   /* words added to the one's complement sum, or a removed part's csum16 */
    bit<16> csum_shim_md; /* csum16 (= ~sum) of the shim and MD header the sink removes */
    bit<16> csum_hop0;    /* csum16 of each hop record the sink removes (0: none) */
    bit<16> csum_hop1;
    bit<16> csum_hop2;
    bit<16> csum_hop3;
}

/* ------------------------------------------------------------------------------------------------------ */
parser FabricParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            ETHERTYPE_IPV6: parse_ipv6;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.ihl == 5, error.HeaderTooShort);
        transition select(hdr.ipv4.protocol, hdr.ipv4.dscp) {
            (PROTO_UDP, DSCP_INT): parse_udp_int;
            (PROTO_UDP, _): parse_udp;
            default: accept;
        }
    }
    state parse_ipv6 {
        packet.extract(hdr.ipv6);
        transition select(hdr.ipv6.next_hdr, hdr.ipv6.dscp) {
            (PROTO_UDP, DSCP_INT): parse_udp_int;
            (PROTO_UDP, _): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        transition accept;
    }
    state parse_udp_int {
        packet.extract(hdr.udp);
        packet.extract(hdr.int_shim);
        packet.extract(hdr.int_md);
        meta.int_words_left = hdr.int_shim.len - 4;
        transition select(meta.int_words_left) {
            0: accept;
            default: parse_int_hop;
        }
    }
    state parse_int_hop {
        packet.extract(hdr.int_hops.next);
        meta.int_words_left = meta.int_words_left - 7;
        transition select(meta.int_words_left) {
            0: accept;
            default: parse_int_hop;
        }
    }
}

control FabricVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

/* ------------------------------------------------------------------------------------------------------ */
control FabricIngress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t standard_metadata) {
    counter(512, CounterType.packets_and_bytes) port_rx;
    counter(8, CounterType.packets) drop_reasons;
    register<bit<32>>(1024) int_report_seq;   /* INT packets of a flow (UDP source port slot) since its report */

    action drop_with(bit<32> reason) {
        drop_reasons.count(reason);
        mark_to_drop(standard_metadata);
    }
    action drop_no_route() {
        drop_with(DROP_NO_ROUTE);
    }
    action forward(bit<9> port, mac_addr_t dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.dst_addr = dmac;
    }
    action ecmp_select(bit<16> group, bit<16> size) {
        meta.ecmp_group = group;
        meta.ecmp_size = size;
    }
    action set_ecmp_member(bit<9> port, mac_addr_t dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.dst_addr = dmac;
    }
    action int_source() {
        meta.int_source = 1;
    }
    action int_sink(bit<1> strip, bit<32> report_every) {
        meta.int_sink_strip = strip;
        meta.int_report_every = report_every;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dst_addr: lpm; }
        actions = { forward; ecmp_select; drop_no_route; }
        const default_action = drop_no_route();
        size = 4096;
    }
    table ipv6_lpm {
        key = { hdr.ipv6.dst_addr: lpm; }
        actions = { forward; ecmp_select; drop_no_route; }
        const default_action = drop_no_route();
        size = 4096;
    }
    table ecmp_group {
        key = { meta.ecmp_group: exact; meta.ecmp_index: exact; }
        actions = { set_ecmp_member; drop_no_route; }
        const default_action = drop_no_route();
        size = 1024;
    }
    table int_watchlist {
        key = {
            hdr.ipv4.src_addr: ternary;
            hdr.ipv4.dst_addr: ternary;
            hdr.udp.dst_port: ternary;
        }
        actions = { int_source; NoAction; }
        default_action = NoAction();
        size = 256;
    }
    table int_watchlist6 {
        key = {
            hdr.ipv6.src_addr: ternary;
            hdr.ipv6.dst_addr: ternary;
            hdr.udp.dst_port: ternary;
        }
        actions = { int_source; NoAction; }
        default_action = NoAction();
        size = 256;
    }
    table int_sink_config {
        key = { standard_metadata.egress_spec: exact; }
        actions = { int_sink; NoAction; }
        default_action = NoAction();
        size = 512;
    }

    apply {
        port_rx.count((bit<32>) standard_metadata.ingress_port);
        if (standard_metadata.parser_error != error.NoError) {
            drop_with(DROP_PARSER);
            return;
        }
        if (hdr.ipv4.isValid()) {
            if (hdr.ipv4.ttl <= 1) {
                drop_with(DROP_TTL);
                return;
            }
            hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
            switch (ipv4_lpm.apply().action_run) {
                ecmp_select: {
                    hash(meta.ecmp_index, HashAlgorithm.crc16, (bit<16>) 0,
                         { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4.protocol, hdr.udp.src_port,
                           hdr.udp.dst_port },
                         (bit<32>) meta.ecmp_size);
                    meta.ecmp_chosen = 1;
                }
            }
            if (hdr.udp.isValid() && !hdr.int_shim.isValid()) {
                int_watchlist.apply();
            }
        } else if (hdr.ipv6.isValid()) {
            if (hdr.ipv6.hop_limit <= 1) {
                drop_with(DROP_TTL);
                return;
            }
            hdr.ipv6.hop_limit = hdr.ipv6.hop_limit - 1;
            switch (ipv6_lpm.apply().action_run) {
                ecmp_select: {
                    hash(meta.ecmp_index, HashAlgorithm.crc16, (bit<16>) 0,
                         { hdr.ipv6.src_addr, hdr.ipv6.dst_addr, hdr.ipv6.next_hdr, hdr.ipv6.flow_label,
                           hdr.udp.src_port, hdr.udp.dst_port },
                         (bit<32>) meta.ecmp_size);
                    meta.ecmp_chosen = 1;
                }
            }
            if (hdr.udp.isValid() && !hdr.int_shim.isValid()) {
                int_watchlist6.apply();
            }
        } else {
            drop_with(DROP_NO_ROUTE);
            return;
        }
        /* one ecmp_group apply for both families: p4c's BMv2 back end rejects a table applied on two paths with
           different successors (each table has one set of next tables in BMv2's pipeline graph) */
        if (meta.ecmp_chosen == 1) {
            ecmp_group.apply();
        }
        /* INT sink toward a host: one packet in report_every of its flow is reported to the collector. Report
           mode: an ingress-to-egress clone carries the stack (its egress adds this hop, and the shim too when this
           switch is also the source, hence the preserved int_source flag); the original is stripped in egress.
           Host mode: egress clones it as it leaves (below). An INT echo (an ACK carrying its sender's forward hops
           back) is not reported. */
        if ((hdr.int_shim.isValid() || meta.int_source == 1) && int_sink_config.apply().hit
                && meta.int_report_every != 0
                && !(hdr.int_md.isValid() && hdr.int_md.domain_specific_id == INT_ECHO_DOMAIN_ID)) {
            meta.int_report_slot = (bit<32>) hdr.udp.src_port[9:0];
            int_report_seq.read(meta.int_report_seq, meta.int_report_slot);
            meta.int_report_seq = meta.int_report_seq + 1;
            if (meta.int_report_seq >= meta.int_report_every) {
                meta.int_report_seq = 0;
                meta.int_report = 1;
                if (meta.int_sink_strip == 1) {
                    clone_preserving_field_list(CloneType.I2E, REPORT_MIRROR_SESSION, INT_REPORT_FIELDS);
                }
            }
            int_report_seq.write(meta.int_report_slot, meta.int_report_seq);
        }
    }
}

/* ------------------------------------------------------------------------------------------------------ */
control FabricEgress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t standard_metadata) {
    counter(512, CounterType.packets_and_bytes) port_tx;
    counter(512, CounterType.packets) ecn_marks;
    register<bit<32>>(512) tx_bytes;

    action set_switch(bit<32> node_id) {
        meta.node_id = node_id;
    }
    action set_port_mac(mac_addr_t smac) {
        hdr.ethernet.src_addr = smac;
    }
    action set_red(bit<32> kmin, bit<32> kmax, bit<32> pmax) {
        meta.red_kmin = kmin;
        meta.red_kmax = kmax;
        meta.red_pmax = pmax;
    }
    action set_red_bytes(bit<32> kmin, bit<32> kmax, bit<32> pmax) {
        /* queue depth in bytes, estimated as packets left in the queue times this packet's length */
        meta.qdepth = (bit<32>) standard_metadata.deq_qdepth * standard_metadata.packet_length;
        meta.red_kmin = kmin;
        meta.red_kmax = kmax;
        meta.red_pmax = pmax;
    }
    table switch_config {
        key = { }
        actions = { set_switch; }
        default_action = set_switch(0);
    }
    table port_mac {
        key = { standard_metadata.egress_port: exact; }
        actions = { set_port_mac; NoAction; }
        default_action = NoAction();
        size = 512;
    }
    table ecn_config {
        key = { standard_metadata.egress_port: exact; }
        actions = { set_red; set_red_bytes; NoAction; }
        default_action = NoAction();
        size = 512;
    }
    apply {
        switch_config.apply();
        /* every packet leaving a port counts toward its transmitted bytes (HPCC reads the difference) */
        tx_bytes.read(meta.tx_bytes, (bit<32>) standard_metadata.egress_port);
        meta.tx_bytes = meta.tx_bytes + standard_metadata.packet_length;
        tx_bytes.write((bit<32>) standard_metadata.egress_port, meta.tx_bytes);
        port_tx.count((bit<32>) standard_metadata.egress_port);
        port_mac.apply();

        /* RED-style ECN: no mark below kmin, probability rising linearly to pmax at kmax, always above kmax.
           Judged on the depth at dequeue (deq_qdepth), as DCTCP-style switches and the HPCC authors' ns-3 switch
           do: the enqueue depth is as old as the packet's queueing delay, so marks would lag the queue by it. */
        meta.qdepth = (bit<32>) standard_metadata.deq_qdepth;   /* set_red_bytes turns it into bytes */
        if (hdr.ipv4.isValid()) {
            meta.dscp = hdr.ipv4.dscp;
            if (hdr.ipv4.ecn != 0) {
                meta.ecn_capable = 1;
            }
        } else if (hdr.ipv6.isValid()) {
            meta.dscp = hdr.ipv6.dscp;
            if (hdr.ipv6.ecn != 0) {
                meta.ecn_capable = 1;
            }
        }
        if (meta.ecn_capable == 1 && ecn_config.apply().hit) {
            if (meta.qdepth >= meta.red_kmax) {
                meta.ecn_mark = 1;
            } else if (meta.qdepth > meta.red_kmin) {
                random(meta.red_random, (bit<32>) 0, (bit<32>) 65535);
                /* mark with probability pmax/2^16 * (q - kmin) / (kmax - kmin), without a division */
                if ((bit<64>) meta.red_random * (bit<64>) (meta.red_kmax - meta.red_kmin)
                        < (bit<64>) meta.red_pmax * (bit<64>) (meta.qdepth - meta.red_kmin)) {
                    meta.ecn_mark = 1;
                }
            }
            if (meta.ecn_mark == 1) {
                if (hdr.ipv4.isValid()) {
                    hdr.ipv4.ecn = 3;
                } else {
                    hdr.ipv6.ecn = 3;   /* the traffic class is outside the UDP checksum's pseudo-header */
                }
            }
            if ((hdr.ipv4.isValid() && hdr.ipv4.ecn == 3) || (hdr.ipv6.isValid() && hdr.ipv6.ecn == 3)) {
                ecn_marks.count((bit<32>) standard_metadata.egress_port);
            }
        }

        /* INT source: add the shim and the MD header (the hop below fills the first metadata) */
        if (meta.int_source == 1 && hdr.udp.isValid() && !hdr.int_shim.isValid()) {
            hdr.int_shim.setValid();
            hdr.int_shim.type = 1;
            hdr.int_shim.npt = 0;
            hdr.int_shim.len = 4;
            hdr.int_shim.orig_dscp = meta.dscp;
            hdr.int_md.setValid();
            hdr.int_md.ver = 2;
            hdr.int_md.hop_ml = INT_HOP_WORDS;
            hdr.int_md.remaining_hop_cnt = MAX_INT_HOPS;
            hdr.int_md.instruction_mask = INT_INSTRUCTIONS;
            hdr.udp.len = hdr.udp.len + (bit<16>) INT_HEADER_BYTES;
            if (hdr.ipv4.isValid()) {
                hdr.ipv4.dscp = DSCP_INT;
                hdr.ipv4.total_len = hdr.ipv4.total_len + (bit<16>) INT_HEADER_BYTES;
                hdr.udp.checksum = 0;   /* IPv4: zero means "no checksum", as RoCEv2 senders do */
            } else {
                hdr.ipv6.dscp = DSCP_INT;
                hdr.ipv6.payload_len = hdr.ipv6.payload_len + (bit<16>) INT_HEADER_BYTES;
                if (hdr.udp.checksum != 0) {
                    meta.csum_neg = ~hdr.udp.checksum;
                    meta.csum_delta = CSUM_SOURCE_LEN;
                    hash(hdr.udp.checksum, HashAlgorithm.csum16, (bit<16>) 0,
                         { meta.csum_neg, meta.csum_delta, hdr.int_shim, hdr.int_md }, (bit<32>) 65536);
                    if (hdr.udp.checksum == 0) {
                        hdr.udp.checksum = 0xFFFF;   /* a computed 0 is sent as all ones (RFC 768) */
                    }
                }
            }
        }

        /* INT transit (every INT hop, the source included): push this hop's metadata; not on a host-mode report
           (an egress clone already carries this hop, the one toward the host) */
        if (hdr.int_md.isValid() && standard_metadata.instance_type != INSTANCE_EGRESS_CLONE) {
            if (hdr.int_md.remaining_hop_cnt == 0) {
                if (hdr.int_md.e == 0 && hdr.ipv6.isValid() && hdr.udp.checksum != 0) {
                    meta.csum_neg = ~hdr.udp.checksum;
                    meta.csum_delta = CSUM_E_BIT;
                    hash(hdr.udp.checksum, HashAlgorithm.csum16, (bit<16>) 0, { meta.csum_neg, meta.csum_delta },
                         (bit<32>) 65536);
                    if (hdr.udp.checksum == 0) {
                        hdr.udp.checksum = 0xFFFF;
                    }
                }
                hdr.int_md.e = 1;
            } else {
                hdr.int_hops.push_front(1);
                hdr.int_hops[0].setValid();
                hdr.int_hops[0].node_id = meta.node_id;
                hdr.int_hops[0].ingress_port_id = (bit<16>) standard_metadata.ingress_port;
                hdr.int_hops[0].egress_port_id = (bit<16>) standard_metadata.egress_port;
                hdr.int_hops[0].hop_latency = standard_metadata.deq_timedelta;
                hdr.int_hops[0].queue_id = (bit<8>) standard_metadata.priority;   /* the TM queue */
                hdr.int_hops[0].queue_occupancy = (bit<24>) standard_metadata.deq_qdepth;
                hdr.int_hops[0].egress_timestamp = (bit<64>) standard_metadata.egress_global_timestamp;
                hdr.int_hops[0].egress_tx_bytes = meta.tx_bytes;
                hdr.int_md.remaining_hop_cnt = hdr.int_md.remaining_hop_cnt - 1;
                hdr.int_shim.len = hdr.int_shim.len + (bit<8>) INT_HOP_WORDS;
                hdr.udp.len = hdr.udp.len + (bit<16>) INT_HOP_BYTES;
                if (hdr.ipv4.isValid()) {
                    hdr.ipv4.total_len = hdr.ipv4.total_len + (bit<16>) INT_HOP_BYTES;
                } else {
                    hdr.ipv6.payload_len = hdr.ipv6.payload_len + (bit<16>) INT_HOP_BYTES;
                    if (hdr.udp.checksum != 0) {
                        meta.csum_neg = ~hdr.udp.checksum;
                        meta.csum_delta = CSUM_TRANSIT;
                        hash(hdr.udp.checksum, HashAlgorithm.csum16, (bit<16>) 0,
                             { meta.csum_neg, meta.csum_delta, hdr.int_hops[0] }, (bit<32>) 65536);
                        if (hdr.udp.checksum == 0) {
                            hdr.udp.checksum = 0xFFFF;
                        }
                    }
                }
            }
        }

        /* INT sink toward a host: strip the stack (report mode; the clone went to the collector) or leave it
           for the receiver, which echoes it back for HPCC. Stripping restores the original bytes, so the RoCE
           ICRC (which covers the IP and UDP lengths) is valid again. */
        if (hdr.int_shim.isValid() && meta.int_sink_strip == 1) {
            if (standard_metadata.instance_type == 0) {
                bit<16> int_bytes = ((bit<16>) hdr.int_shim.len) << 2;
                if (hdr.ipv4.isValid()) {
                    hdr.ipv4.dscp = hdr.int_shim.orig_dscp;
                    hdr.ipv4.total_len = hdr.ipv4.total_len - int_bytes;
                } else {
                    hdr.ipv6.dscp = hdr.int_shim.orig_dscp;
                    hdr.ipv6.payload_len = hdr.ipv6.payload_len - int_bytes;
                    if (hdr.udp.checksum != 0) {
                        /* remove the INT words and 2 x int_bytes: add the csum16 (= ~sum) of each removed part */
                        meta.csum_neg = ~hdr.udp.checksum;
                        meta.csum_delta = ~(int_bytes << 1);
                        if (hdr.int_hops[0].isValid()) {
                            hash(meta.csum_hop0, HashAlgorithm.csum16, (bit<16>) 0, { hdr.int_hops[0] },
                                 (bit<32>) 65536);
                        }
                        if (hdr.int_hops[1].isValid()) {
                            hash(meta.csum_hop1, HashAlgorithm.csum16, (bit<16>) 0, { hdr.int_hops[1] },
                                 (bit<32>) 65536);
                        }
                        if (hdr.int_hops[2].isValid()) {
                            hash(meta.csum_hop2, HashAlgorithm.csum16, (bit<16>) 0, { hdr.int_hops[2] },
                                 (bit<32>) 65536);
                        }
                        if (hdr.int_hops[3].isValid()) {
                            hash(meta.csum_hop3, HashAlgorithm.csum16, (bit<16>) 0, { hdr.int_hops[3] },
                                 (bit<32>) 65536);
                        }
                        hash(meta.csum_shim_md, HashAlgorithm.csum16, (bit<16>) 0, { hdr.int_shim, hdr.int_md },
                             (bit<32>) 65536);
                        hash(hdr.udp.checksum, HashAlgorithm.csum16, (bit<16>) 0,
                             { meta.csum_neg, meta.csum_delta, meta.csum_shim_md, meta.csum_hop0, meta.csum_hop1,
                               meta.csum_hop2, meta.csum_hop3 }, (bit<32>) 65536);
                        if (hdr.udp.checksum == 0) {
                            hdr.udp.checksum = 0xFFFF;
                        }
                    }
                }
                hdr.udp.len = hdr.udp.len - int_bytes;
                hdr.int_shim.setInvalid();
                hdr.int_md.setInvalid();
                hdr.int_hops[0].setInvalid();
                hdr.int_hops[1].setInvalid();
                hdr.int_hops[2].setInvalid();
                hdr.int_hops[3].setInvalid();
            }
        }
        /* host-mode report: the packet as it leaves toward the host, stack and this hop included, to the
           collector (the original goes on unchanged) */
        if (meta.int_report == 1 && meta.int_sink_strip == 0 && standard_metadata.instance_type == 0) {
            clone(CloneType.E2E, REPORT_MIRROR_SESSION);
        }
    }
}

control FabricComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control FabricDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.ipv6);
        packet.emit(hdr.udp);
        packet.emit(hdr.int_shim);
        packet.emit(hdr.int_md);
        packet.emit(hdr.int_hops);
    }
}

V1Switch(FabricParser(), FabricVerifyChecksum(), FabricIngress(), FabricEgress(),
         FabricComputeChecksum(), FabricDeparser()) main;

"""The v1model packet pipeline as separately callable stages, with BMv2 simple_switch semantics.

``ingress(port, frame)`` runs parser -> verifyChecksum -> ingress and decides (as BMv2 does, in this order)
I2E clone, digests, resubmit, multicast replication, drop (egress_spec 511) or unicast; it returns the
packets to enqueue.  The traffic manager (a queue per port, outside this module) later calls
``egress(pkt, enq/deq metadata)`` which runs egress -> computeChecksum -> deparser and returns frames to
transmit, E2E clones to enqueue and recirculations.  ``process`` chains the stages with empty queues.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from p4.errors import CommandError
from p4.program import (
    CLONE_FL,
    CLONE_SESSION,
    DIGESTS,
    DROP_PORT,
    NO_FIELD_LIST,
    PAYLOAD,
    PKT_EGRESS_CLONE,
    PKT_INGRESS_CLONE,
    PKT_NORMAL,
    PKT_RECIRC,
    PKT_REPLICATION,
    PKT_RESUBMIT,
    RECIRC_FL,
    RESUBMIT_FL,
    TRUNCATE,
    AssertFailed,
    ParserError,
    Program,
)
from sw.clock import Clock, get_clock

MAX_RESUBMITS = 16  # loops of resubmit/recirculate per original packet before the copy is dropped


def run_controls(S: list[Any], first: Any, second: Any) -> str | None:
    """Run two controls on a packet's state in order; the drop reason when one aborts it, as BMv2 drops it
    (a failed ``assert``, a header stack index out of bounds), else None."""
    try:
        first(S)
        second(S)
    except AssertFailed as exc:
        return f"assert failed at {exc}"
    except ParserError:
        return "header stack index out of bounds in a control"
    return None


@dataclass(slots=True)
class PipelinePacket:
    """A packet between ingress and egress: its state list and where/how it is to be queued."""

    S: list[Any]
    egress_port: int
    instance_type: int
    priority: int
    length_bytes: int
    rid: int = 0
    loops: int = 0


@dataclass(slots=True)
class Digest:
    """A ``digest(receiver, data)`` message for the control plane."""

    receiver: int
    name: str
    fields: dict[str, int]


@dataclass(slots=True)
class IngressResult:
    queued: list[PipelinePacket] = field(default_factory=list)
    digests: list[Digest] = field(default_factory=list)
    dropped: str | None = None      # reason when the original packet was dropped


@dataclass(slots=True)
class EgressResult:
    out: list[tuple[int, bytes]] = field(default_factory=list)          # (port, frame) to transmit
    queued: list[PipelinePacket] = field(default_factory=list)            # E2E clones
    recirculate: list[tuple[bytes, list[tuple[int, Any]]]] = field(default_factory=list)
    dropped: str | None = None
    error: Exception | None = None      # egress_batch only: the program raised (a target bug) on this packet


@dataclass(slots=True)
class McNode:
    rid: int
    ports: list[int]


class Pipeline:
    """Run-time instance of a compiled program: tables/externs state, PRE (multicast), mirror sessions."""

    def __init__(self, program: Program, clock: Clock | None = None, device_id: int = 0) -> None:
        self.program = program
        inst = program.instantiate()       # this pipeline's own tables/externs, stage functions bound to them
        self.state = inst.state
        self.tables, self.actions = inst.state.tables, inst.state.actions
        self.registers, self.counters, self.meters = inst.state.registers, inst.state.counters, inst.state.meters
        self.profiles, self.value_sets = inst.state.profiles, inst.state.value_sets
        self._parser, self._verify, self._ingress = inst.parser, inst.verify_checksum, inst.ingress
        self._egress, self._compute, self._deparser = inst.egress, inst.compute_checksum, inst.deparser
        self.clock = clock or get_clock()
        self.device_id = device_id
        sm = program.sm
        self._sm = sm
        self._ingress_port = sm["ingress_port"]
        self._egress_spec = sm["egress_spec"]
        self._egress_port = sm["egress_port"]
        self._instance_type = sm["instance_type"]
        self._packet_length = sm["packet_length"]
        self._parser_error = sm["parser_error"]
        self._mcast_grp = sm["mcast_grp"]
        self._egress_rid = sm["egress_rid"]
        self._priority = sm.get("priority")
        self._ig_ts = sm.get("ingress_global_timestamp")
        self._eg_ts = sm.get("egress_global_timestamp")
        self._init = program.init_state
        self._enq_qdepth = sm["enq_qdepth"]
        self._deq_qdepth = sm["deq_qdepth"]
        self._deq_timedelta = sm["deq_timedelta"]
        self._enq_timestamp = sm["enq_timestamp"]
        self._meta_lo, self._meta_hi = program.meta_range
        self._sm_lo = min(sm.values())
        self._sm_hi = max(sm.values()) + 1
        self.mc_groups: dict[int, list[int]] = {}
        self.mc_nodes: dict[int, McNode] = {}
        self._next_node = 0
        self.mirror_sessions: dict[int, int] = {}
        self.mirror_replicas: dict[int, list[tuple[int, int]]] = {}   # sessions of several (port, rid) replicas
        # P4Runtime clone session options: session -> (class of service: the copies' queue priority, 0..7;
        # packet_length_bytes: the copies leave truncated to it, 0 = whole)
        self.clone_options: dict[int, tuple[int, int]] = {}
        # Traffic-manager settings from set_queue_depth / set_queue_rate (key None = all ports); the switch
        # process (not this module) applies them to its queues.
        self.queue_depth_pkts: dict[int | None, int] = {}
        self.queue_rate_pps: dict[int | None, float] = {}
        self.queue_depth_pkts_prio: dict[tuple[int | None, int], int] = {}
        self.queue_rate_pps_prio: dict[tuple[int | None, int], float] = {}
        self.drops: collections.Counter[str] = collections.Counter()
        self.parser_errors: collections.Counter[str] = collections.Counter()  # by P4 error name
        self.digests: collections.deque[Digest] = collections.deque(maxlen=65536)  # recent digests
        ns = inst.namespace
        ns["_now_us"] = self._now_us
        self.log = ns["_log"]

    def _now_us(self) -> int:
        return self.clock.now_ns() // 1000

    # --- ingress ------------------------------------------------------------------------------------------
    def ingress(self, port: int, frame: bytes, *, instance_type: int = PKT_NORMAL,
                preserved: list[tuple[int, Any]] | None = None, loops: int = 0) -> IngressResult:
        """Parse and run ingress on one received frame; returns what to enqueue (and digests, drops)."""
        res = IngressResult()
        S = self._run_ingress(port, frame, instance_type, preserved, res)
        if S is None:
            return res
        return self._after_ingress(S, port, frame, instance_type, loops, res)

    def ingress_batch(self, port: int, frames: list[bytes]) -> Iterator[list[PipelinePacket] | IngressResult]:
        """``ingress`` for frames of one port in order, one clock reading for all, lazily, so the caller can
        enqueue each frame's packets and run egress on what is due before the next frame's ingress runs.

        Per frame: a list with the one unicast packet to enqueue ([] when dropped), or the ``IngressResult``
        when more happened (clone, digest, resubmit, multicast); drops and parser errors are counted as
        ``ingress`` counts them."""
        parser, verify, ingress = self._parser, self._verify, self._ingress
        init = self._init
        ip_s, pl_s, it_s, pe_s = self._ingress_port, self._packet_length, self._instance_type, self._parser_error
        es_s, ep_s, mc_s, pr_s, ig_s = (self._egress_spec, self._egress_port, self._mcast_grp, self._priority,
                                        self._ig_ts)
        now48 = self._now_us() & 0xFFFFFFFFFFFF
        errors, parser_errors, drops = self.program.errors, self.parser_errors, self.drops
        for frame in frames:
            S = init[:]
            S[ip_s] = port
            n = S[pl_s] = len(frame)
            S[it_s] = PKT_NORMAL
            if ig_s is not None:
                S[ig_s] = now48
            off, err = parser(S, frame)
            S[PAYLOAD] = frame[off:]
            S[pe_s] = err
            if err:
                parser_errors[errors[err]] += 1
            aborted = run_controls(S, verify, ingress)
            if aborted:
                drops[aborted] += 1
                yield []
                continue
            if S[CLONE_SESSION] >= 0 or S[DIGESTS] is not None or S[RESUBMIT_FL] != NO_FIELD_LIST or S[mc_s]:
                yield self._after_ingress(S, port, frame, PKT_NORMAL, 0, IngressResult())
                continue
            spec = S[es_s]
            if spec == DROP_PORT:
                drops["egress_spec=511 (mark_to_drop)"] += 1
                yield []
                continue
            S[ep_s] = spec
            yield [PipelinePacket(S, spec, PKT_NORMAL, S[pr_s] if pr_s is not None else 0, n)]

    def _run_ingress(self, port: int, frame: bytes, instance_type: int,
                     preserved: list[tuple[int, Any]] | None, res: IngressResult) -> list[Any] | None:
        prog = self.program
        S = self._init[:]
        S[self._ingress_port] = port
        S[self._packet_length] = len(frame)
        S[self._instance_type] = instance_type
        if self._ig_ts is not None:
            S[self._ig_ts] = (self.clock.now_ns() // 1000) & 0xFFFFFFFFFFFF
        if preserved:
            for slot, v in preserved:
                S[slot] = v
        off, err = self._parser(S, frame)
        S[PAYLOAD] = frame[off:]
        S[self._parser_error] = err
        if err:
            self.parser_errors[prog.errors[err]] += 1
        aborted = run_controls(S, self._verify, self._ingress)
        if aborted:
            self._drop(res, aborted)
            return None
        return S

    def _after_ingress(self, S: list[Any], port: int, frame: bytes, instance_type: int, loops: int,
                       res: IngressResult) -> IngressResult:
        """BMv2's post-ingress decisions, in its order: I2E clone, digests, resubmit, multicast/drop/unicast."""
        prog = self.program
        # 1. ingress-to-egress clone: the original frame, parsed again, metadata reset but the field list
        session = S[CLONE_SESSION]
        if session >= 0:
            S[CLONE_SESSION] = -1
            targets = self.clone_targets(session)
            if targets is None:
                self.drops["clone to unconfigured mirror session"] += 1
            for port_out, rid in targets or ():
                C = self._init[:]
                C[self._ingress_port] = port
                C[self._packet_length] = len(frame)
                coff, cerr = self._parser(C, frame)
                C[PAYLOAD] = frame[coff:]
                C[self._parser_error] = cerr
                self._copy_field_list(S, C, S[CLONE_FL])
                C[self._instance_type] = PKT_INGRESS_CLONE
                C[self._egress_port] = port_out
                C[self._egress_rid] = rid
                cos = self._clone_cos_truncate(C, session)
                res.queued.append(PipelinePacket(C, port_out, PKT_INGRESS_CLONE, cos, len(frame), rid))
        # 2. digests
        if S[DIGESTS] is not None:
            for receiver, k, values in S[DIGESTS]:
                lay = prog.digest_layouts[k]
                d = Digest(receiver, lay.receiver_name, {n: v for (n, _), v in zip(lay.fields, values,
                                                                                    strict=True)})
                res.digests.append(d)
                self.digests.append(d)
            S[DIGESTS] = None
        # 3. resubmit: the original frame goes through ingress again (this copy is not forwarded)
        if S[RESUBMIT_FL] != NO_FIELD_LIST:
            if loops >= MAX_RESUBMITS:
                self._drop(res, "resubmit loop limit")
                return res
            keep = self._field_list_values(S, S[RESUBMIT_FL])
            again = self.ingress(port, frame, instance_type=PKT_RESUBMIT, preserved=keep, loops=loops + 1)
            res.queued.extend(again.queued)
            res.digests.extend(again.digests)
            res.dropped = again.dropped
            return res
        # 4. multicast / drop / unicast
        prio = S[self._priority] if self._priority is not None else 0
        grp = S[self._mcast_grp]
        if grp:
            nodes = self.mc_groups.get(grp)
            if not nodes:
                self._drop(res, f"multicast group {grp} has no members")
                return res
            for h in nodes:
                node = self.mc_nodes[h]
                for p in node.ports:
                    C = S[:]
                    C[self._egress_port] = p
                    C[self._egress_rid] = node.rid
                    C[self._instance_type] = PKT_REPLICATION
                    res.queued.append(PipelinePacket(C, p, PKT_REPLICATION, prio, len(frame), node.rid, loops))
            return res
        spec = S[self._egress_spec]
        if spec == DROP_PORT:
            self._drop(res, "egress_spec=511 (mark_to_drop)")
            return res
        S[self._egress_port] = spec
        res.queued.append(PipelinePacket(S, spec, instance_type, prio, len(frame), 0, loops))
        return res

    def clone_targets(self, session: int) -> list[tuple[int, int]] | None:
        """The (egress port, rid) copies a clone to ``session`` makes; None when the session is not configured."""
        port = self.mirror_sessions.get(session)
        if port is not None:
            return [(port, 0)]
        return self.mirror_replicas.get(session)

    def _clone_cos_truncate(self, C: list[Any], session: int) -> int:
        """Apply ``session``'s P4Runtime options to the copy ``C``: it leaves truncated to packet_length_bytes
        (a ``truncate()`` its egress calls replaces that), its queue priority is the class of service (which
        its egress also sees in ``standard_metadata.priority``); returns that priority."""
        cos, length_bytes = self.clone_options.get(session, (0, 0))
        C[TRUNCATE] = length_bytes
        if self._priority is not None:
            C[self._priority] = cos
        return cos

    def _drop(self, res: IngressResult | EgressResult, reason: str) -> None:
        res.dropped = reason
        self.drops[reason] += 1

    def _field_list_values(self, S: list[Any], fl: int) -> list[tuple[int, Any]]:
        return [(slot, S[slot]) for slot in self.program.field_lists.get(fl, [])]

    def _copy_field_list(self, src: list[Any], dst: list[Any], fl: int) -> None:
        if fl == NO_FIELD_LIST:
            return
        for slot in self.program.field_lists.get(fl, []):
            dst[slot] = src[slot]

    # --- egress -------------------------------------------------------------------------------------------
    def egress(self, pkt: PipelinePacket, *, enq_qdepth: int = 0, deq_qdepth: int = 0, deq_timedelta_us: int = 0,
               enq_timestamp_us: int | None = None) -> EgressResult:
        """Run egress + deparser for one dequeued packet, given the traffic manager's queue metadata."""
        res = EgressResult()
        S = pkt.S
        now = self.clock.now_ns() // 1000
        S[self._egress_port] = pkt.egress_port
        S[self._egress_spec] = 0
        S[self._enq_qdepth] = enq_qdepth & 0x7FFFF
        S[self._deq_qdepth] = deq_qdepth & 0x7FFFF
        S[self._deq_timedelta] = deq_timedelta_us & 0xFFFFFFFF
        S[self._enq_timestamp] = (now - deq_timedelta_us if enq_timestamp_us is None else enq_timestamp_us) \
            & 0xFFFFFFFF
        if self._eg_ts is not None:
            S[self._eg_ts] = now & 0xFFFFFFFFFFFF
        aborted = run_controls(S, self._egress, self._compute)
        if aborted:
            self._drop(res, aborted)
            return res
        self._post_egress(S, pkt, res)
        return res

    def egress_batch(self, packets: list[PipelinePacket],
                     queue_metadata: list[tuple[int, int, int, int | None]]) -> list[tuple[int, bytes] | EgressResult]:
        """``egress`` for dequeued packets in order, one clock reading for all; queue_metadata per packet is
        (enq_qdepth, deq_qdepth, deq_timedelta_us, enq_timestamp_us or None) as ``egress`` takes them.

        Per packet the result is ``(port, frame)`` when it only leaves through its port, else its
        ``EgressResult`` (dropped, E2E clone, recirculation, truncation; ``error`` when the program raised).
        The batch stops after a packet with clones, recirculation or an error, so the caller handles those
        before later packets run egress (the per-packet order); call again with the rest.
        """
        now = self.clock.now_ns() // 1000
        egress, compute, deparser = self._egress, self._compute, self._deparser
        ep_s, es_s, eq_s, dq_s = self._egress_port, self._egress_spec, self._enq_qdepth, self._deq_qdepth
        td_s, et_s, eg_s = self._deq_timedelta, self._enq_timestamp, self._eg_ts
        now48 = now & 0xFFFFFFFFFFFF
        join = b"".join
        out: list[tuple[int, bytes] | EgressResult] = []
        append = out.append
        for pkt, (enq_qdepth, deq_qdepth, deq_timedelta_us, enq_timestamp_us) in zip(packets, queue_metadata,
                                                                                    strict=True):
            S = pkt.S
            port = pkt.egress_port
            try:
                S[ep_s] = port
                S[es_s] = 0
                S[eq_s] = enq_qdepth & 0x7FFFF
                S[dq_s] = deq_qdepth & 0x7FFFF
                S[td_s] = deq_timedelta_us & 0xFFFFFFFF
                S[et_s] = (now - deq_timedelta_us if enq_timestamp_us is None else enq_timestamp_us) & 0xFFFFFFFF
                if eg_s is not None:
                    S[eg_s] = now48
                aborted = run_controls(S, egress, compute)
                if aborted:
                    res = EgressResult()
                    self._drop(res, aborted)
                    append(res)
                    continue
                if S[CLONE_SESSION] >= 0 or S[RECIRC_FL] != NO_FIELD_LIST or S[TRUNCATE] or S[es_s] == DROP_PORT:
                    res = EgressResult()
                    self._post_egress(S, pkt, res)
                    append(res)
                    if res.queued or res.recirculate:
                        return out
                    continue
                append((port, join(deparser(S)) + S[PAYLOAD]))
            except Exception as exc:  # reported per packet; the caller decides (the switch logs)
                append(EgressResult(error=exc))
                return out
        return out

    def _post_egress(self, S: list[Any], pkt: PipelinePacket, res: EgressResult) -> None:
        """BMv2's post-egress order: E2E clone, drop on egress_spec 511, deparse, truncate, recirculate."""
        session = S[CLONE_SESSION]
        if session >= 0:
            S[CLONE_SESSION] = -1
            targets = self.clone_targets(session)
            if targets is None:
                self.drops["clone to unconfigured mirror session"] += 1
            for port_out, rid in targets or ():
                C = S[:]
                init = self._init
                C[self._meta_lo:self._meta_hi] = init[self._meta_lo:self._meta_hi]
                C[self._sm_lo:self._sm_hi] = init[self._sm_lo:self._sm_hi]
                self._copy_field_list(S, C, S[CLONE_FL])
                C[RECIRC_FL] = NO_FIELD_LIST
                C[TRUNCATE] = 0
                C[self._instance_type] = PKT_EGRESS_CLONE
                C[self._egress_port] = port_out
                C[self._egress_rid] = rid
                C[self._packet_length] = S[self._packet_length]
                cos = self._clone_cos_truncate(C, session)
                res.queued.append(PipelinePacket(C, port_out, PKT_EGRESS_CLONE, cos, pkt.length_bytes, rid,
                                               pkt.loops + 1))
        if S[self._egress_spec] == DROP_PORT:
            self._drop(res, "egress_spec=511 in egress (mark_to_drop)")
            return
        frame = b"".join(self._deparser(S)) + S[PAYLOAD]
        if S[TRUNCATE]:
            frame = frame[: S[TRUNCATE]]
        if S[RECIRC_FL] != NO_FIELD_LIST:
            if pkt.loops >= MAX_RESUBMITS:
                self._drop(res, "recirculate loop limit")
                return
            res.recirculate.append((frame, self._field_list_values(S, S[RECIRC_FL])))
            return
        res.out.append((pkt.egress_port, frame))

    def recirculate(self, port: int, frame: bytes, preserved: list[tuple[int, Any]], loops: int = 0) -> IngressResult:
        """Feed a recirculated frame back into ingress (instance_type RECIRC)."""
        return self.ingress(port, frame, instance_type=PKT_RECIRC, preserved=preserved, loops=loops + 1)

    # --- the whole pipeline with zero-delay queues --------------------------------------------------------
    def process(self, port: int, frame: bytes) -> tuple[list[tuple[int, bytes]], IngressResult]:
        """Ingress -> (empty) queues -> egress for one frame; returns frames out and the ingress result."""
        first = self.ingress(port, frame)
        out: list[tuple[int, bytes]] = []
        work = collections.deque(first.queued)
        while work:
            qp = work.popleft()
            er = self.egress(qp)
            out.extend(er.out)
            work.extend(er.queued)
            for rframe, keep in er.recirculate:
                again = self.recirculate(port, rframe, keep, qp.loops)
                first.digests.extend(again.digests)
                work.extend(again.queued)
        return out, first

    def process_batch(self, frames: list[tuple[int, bytes]],
                      priorities: list[int] | None = None) -> list[tuple[int, bytes]]:
        """Batched mode: many frames with one clock reading per batch; outputs concatenated in order.

        The common case (unicast, no clone/digest/resubmit/recirculate/truncate) runs inline with locals
        bound once; anything else continues on the general stages, so results equal ``process`` per frame.
        ``priorities``, when given, gets each output's ``standard_metadata.priority`` at the end of ingress (the
        TM queue it would have used; clones and recirculated copies get their original's), in output order.
        """
        prog = self.program
        parser, verify, ingress = self._parser, self._verify, self._ingress
        egress, compute, deparser = self._egress, self._compute, self._deparser
        init = self._init
        ip_s, pl_s, pe_s, es_s, ep_s = (self._ingress_port, self._packet_length, self._parser_error,
                                        self._egress_spec, self._egress_port)
        mc_s = self._mcast_grp
        pr_s = self._priority if priorities is not None else None
        prios = priorities if priorities is not None else []   # written only when pr_s is set
        now = self._now_us()
        ts_ig = self._ig_ts if self._ig_ts is not None else TRUNCATE  # harmless scratch write, reset below
        ts_eg = self._eg_ts if self._eg_ts is not None else TRUNCATE
        enq_ts = self._sm.get("enq_timestamp", TRUNCATE)
        now48 = now & 0xFFFFFFFFFFFF if self._ig_ts is not None else 0
        now32 = now & 0xFFFFFFFF if "enq_timestamp" in self._sm else 0
        drops = self.drops
        out: list[tuple[int, bytes]] = []
        append = out.append
        join = b"".join
        for port, frame in frames:
            S = init[:]
            S[ip_s] = port
            S[pl_s] = len(frame)
            S[ts_ig] = now48
            off, err = parser(S, frame)
            S[PAYLOAD] = frame[off:]
            S[pe_s] = err
            if err:
                self.parser_errors[prog.errors[err]] += 1
            try:
                verify(S)
                ingress(S)
            except (AssertFailed, ParserError):
                drops["assert failed or header stack index out of bounds"] += 1
                continue
            if S[CLONE_SESSION] >= 0 or S[DIGESTS] is not None or S[RESUBMIT_FL] != NO_FIELD_LIST or S[mc_s]:
                n_out = len(out)
                res = self._after_ingress(S, port, frame, PKT_NORMAL, 0, IngressResult())
                self._egress_all(port, res.queued, out)
                if pr_s is not None:
                    prios.extend([S[pr_s]] * (len(out) - n_out))
                continue
            spec = S[es_s]
            if spec == DROP_PORT:
                drops["egress_spec=511 (mark_to_drop)"] += 1
                continue
            S[ep_s] = spec
            S[es_s] = 0
            S[enq_ts] = now32
            S[ts_eg] = now48
            try:
                egress(S)
                compute(S)
            except (AssertFailed, ParserError):
                drops["assert failed or header stack index out of bounds"] += 1
                continue
            if S[CLONE_SESSION] >= 0 or S[RECIRC_FL] != NO_FIELD_LIST or S[TRUNCATE]:
                n_out = len(out)
                self._after_egress(S, PipelinePacket(S, spec, PKT_NORMAL, 0, len(frame)), port, out)
                if pr_s is not None:
                    prios.extend([S[pr_s]] * (len(out) - n_out))
                continue
            if S[es_s] == DROP_PORT:
                drops["egress_spec=511 in egress (mark_to_drop)"] += 1
                continue
            append((spec, join(deparser(S)) + S[PAYLOAD]))
            if pr_s is not None:
                prios.append(S[pr_s])
        return out

    def _egress_all(self, port: int, queued: list[PipelinePacket], out: list[tuple[int, bytes]]) -> None:
        work = collections.deque(queued)
        while work:
            qp = work.popleft()
            er = self.egress(qp)
            out.extend(er.out)
            work.extend(er.queued)
            for rframe, keep in er.recirculate:
                work.extend(self.recirculate(port, rframe, keep, qp.loops).queued)

    def _after_egress(self, S: list[Any], qp: PipelinePacket, port: int, out: list[tuple[int, bytes]]) -> None:
        res = EgressResult()
        self._post_egress(S, qp, res)
        out.extend(res.out)
        work = list(res.queued)
        for rframe, keep in res.recirculate:
            work.extend(self.recirculate(port, rframe, keep, qp.loops).queued)
        self._egress_all(port, work, out)

    # --- packet replication engine and mirroring (used by the runtime CLI) -------------------------------
    def mc_group_create(self, grp: int) -> None:
        if grp in self.mc_groups:
            raise CommandError(f"multicast group {grp} already exists")
        if not 0 < grp < 65536:
            raise CommandError(f"multicast group id {grp} out of range 1..65535")
        self.mc_groups[grp] = []

    def mc_group_destroy(self, grp: int) -> None:
        if self.mc_groups.pop(grp, None) is None:
            raise CommandError(f"multicast group {grp} does not exist")

    def mc_node_create(self, rid: int, ports: list[int]) -> int:
        h = self._next_node
        self._next_node += 1
        self.mc_nodes[h] = McNode(rid, sorted(set(ports)))
        return h

    def mc_node_update(self, handle: int, ports: list[int]) -> None:
        self._node(handle).ports = sorted(set(ports))

    def mc_node_destroy(self, handle: int) -> None:
        self._node(handle)
        del self.mc_nodes[handle]
        for nodes in self.mc_groups.values():
            if handle in nodes:
                nodes.remove(handle)

    def mc_node_associate(self, grp: int, handle: int) -> None:
        self._node(handle)
        if grp not in self.mc_groups:
            raise CommandError(f"multicast group {grp} does not exist (create it with mc_mgrp_create)")
        if handle not in self.mc_groups[grp]:
            self.mc_groups[grp].append(handle)

    def mc_node_dissociate(self, grp: int, handle: int) -> None:
        if grp not in self.mc_groups or handle not in self.mc_groups[grp]:
            raise CommandError(f"node {handle} is not associated with group {grp}")
        self.mc_groups[grp].remove(handle)

    def _node(self, handle: int) -> McNode:
        node = self.mc_nodes.get(handle)
        if node is None:
            raise CommandError(f"multicast node handle {handle} does not exist")
        return node

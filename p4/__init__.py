"""P4_16 (v1model) switch programs and the embedded BMv2-compatible software target.

Compile once, then run packets through separately callable stages (the switch process puts its traffic
manager between ingress and egress)::

    from p4.compiler import compile_file          # -> p4.program.Program (raises p4.errors.CompileError)
    from p4.pipeline import Pipeline              # BMv2 simple_switch semantics
    from p4.runtime_cli import RuntimeCLI         # simple_switch_CLI command language

    prog = compile_file("p4/programs/basic.p4")
    pipe = Pipeline(prog, clock=sw.clock.get_clock())
    cli = RuntimeCLI(pipe)
    cli.execute("table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.2.2/32 => 08:00:00:00:02:22 2")
    res = pipe.ingress(port, frame)               # IngressResult: .queued (PipelinePacket: egress_port,
                                                  #   priority, length_bytes), .digests, .dropped
    for qp in res.queued:                         # ... enqueue on qp.egress_port / qp.priority ...
        er = pipe.egress(qp, enq_qdepth=q, deq_qdepth=q2, deq_timedelta_us=dt)
        er.out                                    # [(port, frame)] to transmit
        er.queued                                 # E2E clones to enqueue; er.recirculate -> pipe.recirculate
    pipe.process(port, frame)                     # whole pipeline with empty queues (offline use)
    pipe.process_batch([(port, frame), ...])      # batched fast path (empty queues)
    pipe.ingress_batch(port, frames)              # lazily per frame: [PipelinePacket] / [] (dropped) / IngressResult
    pipe.egress_batch(qps, [(enq_qdepth, deq_qdepth, deq_timedelta_us, enq_timestamp_us), ...])
                                                  # per packet (port, frame) or EgressResult; stops after clones

``pipe.mirror_sessions``, ``pipe.mc_groups``, ``pipe.queue_depth_pkts`` / ``queue_rate_pps`` hold the
state the CLI sets; ``pipe.drops`` counts drops by reason, ``pipe.parser_errors`` parser errors by name,
``pipe.digests`` keeps recent digests.  ``pipe.tables/actions/registers/counters/meters/profiles/value_sets``
are this pipeline's run-time objects behind the CLI: every ``Pipeline(prog)`` gets its own (``prog.instantiate()``
copies the compiled state and binds the generated stages to it; ``prog.tables`` etc. are only declarations).
``starpulse p4 check|sim|bench`` is ``p4.cli`` (``switch`` and ``cli`` come from ``p4.switch``).

Module map: preprocess (cpp-like, keeps file:line) -> parse (LALR grammar ``p4.lark``) -> compiler (types,
layout of the per-packet state list, Python code generation) -> program (the compiled stages) ->
pipeline (v1model/BMv2 packet paths) + tables/externs/algorithms (run-time state) + runtime_cli (command
language) + pcap/sim/bench (offline tools) + stf/stf_cli (p4c's STF packet tests, ``starpulse p4 stf``) +
p4info (the program's P4Info as p4c writes it, over the P4Runtime schema that ``p4runtime_proto`` loads) + runtime
(the P4Runtime gRPC server of ``p4 switch --grpc-port``, its entity translation and a raw-gRPC client; the only
part of ``p4`` that imports grpc).
"""

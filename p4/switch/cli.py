"""``starpulse p4 switch`` and ``starpulse p4 cli``: argument parsing and entry points (wired in by p4/cli.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from p4.errors import P4Error
from p4.switch.trace import LEVELS


class SwitchArgumentError(P4Error):
    """A bad flag value of ``p4 switch`` / ``p4 cli``."""


def add_switch_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``starpulse p4 switch PROG.p4 -i 1@IFACE ...`` (names as BMv2 simple_switch where they exist)."""
    parser.add_argument("program", metavar="PROG.p4", help="P4_16 v1model program")
    parser.add_argument("-I", dest="include", action="append", default=[], metavar="DIR",
                        help="extra #include directory (ours with core.p4/v1model.p4 is always searched)")
    parser.add_argument("-D", dest="define", action="append", default=[], metavar="NAME[=VALUE]",
                        help="preprocessor definition")
    parser.add_argument("-i", "--interface", dest="interfaces", action="append", default=[], metavar="PORT@IFACE",
                        help="bind switch port PORT to interface IFACE (repeat per port)")
    parser.add_argument("--device-id", type=int, default=0, metavar="N", help="device id (default 0)")
    parser.add_argument("--ctl", metavar="PATH|PORT",
                        help="control socket: a Unix socket path, or a TCP port on 127.0.0.1")
    parser.add_argument("--grpc-port", metavar="PORT|unix:PATH",
                        help="serve P4Runtime v1 (gRPC) on 0.0.0.0:PORT (9559 is the usual one) or a Unix socket")
    parser.add_argument("--pcap", metavar="DIR", help="write IFACE_in.pcap and IFACE_out.pcap per port into DIR")
    parser.add_argument("--log-file", metavar="F", help="log to F instead of stderr")
    parser.add_argument("--log-level", default="info", choices=sorted(LEVELS, key=LEVELS.__getitem__),
                        help="log level; 'trace' logs every packet (default info)")
    parser.add_argument("--cpu-port", type=int, metavar="N",
                        help="port whose packets go to control-socket subscribers when no interface is bound")
    parser.add_argument("--priority-queues", type=int, default=1, metavar="N",
                        help="strict-priority queues per egress port, 1..8, by standard_metadata.priority")
    parser.add_argument("--commands", metavar="CMDS.txt",
                        help="simple_switch_CLI commands to apply before forwarding starts")
    parser.add_argument("--no-lag-accounting", dest="lag_accounting", action="store_false",
                        help="do not measure how late ingress and the queues were serviced (no ring timestamps, "
                             "lag_stats refuses): a switch outside a fabric that reports fidelity, e.g. to "
                             "measure what the accounting costs")


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``starpulse p4 cli --ctl PATH|PORT [< cmds.txt]``."""
    parser.add_argument("--ctl", required=True, metavar="PATH|PORT", help="the switch's control socket")
    parser.add_argument("-c", "--command", dest="commands", action="append", default=[], metavar="CMD",
                        help="run CMD and exit (repeatable); otherwise read stdin or start a shell")


def _build_config(args: argparse.Namespace):
    from p4.switch.ports import parse_interface_spec
    from p4.switch.switch import SwitchConfig

    interfaces = [parse_interface_spec(s) for s in args.interfaces]
    seen: dict[int, str] = {}
    for num, ifname in interfaces:
        if num in seen:
            raise SwitchArgumentError(f"-i {num}@{ifname}: port {num} is already bound to {seen[num]}")
        seen[num] = ifname
    if args.device_id < 0:
        raise SwitchArgumentError(f"--device-id {args.device_id}: must be >= 0")
    if args.cpu_port is not None and not 0 <= args.cpu_port <= 510:
        raise SwitchArgumentError(f"--cpu-port {args.cpu_port}: allowed 0..510")
    if not 1 <= args.priority_queues <= 8:
        raise SwitchArgumentError(f"--priority-queues {args.priority_queues}: allowed 1..8")
    return SwitchConfig(interfaces=interfaces, device_id=args.device_id, ctl=args.ctl, pcap_dir=args.pcap,
                        log_file=args.log_file, log_level=args.log_level, cpu_port=args.cpu_port,
                        priority_levels=args.priority_queues, lag_accounting=args.lag_accounting)


def run_switch(args: argparse.Namespace) -> int:
    """Load (from cache) the program, open the ports, print ``ready`` and forward until SIGTERM/SIGINT."""
    from p4.runtime_cli import read_command_file
    from p4.switch.pipeline_adapter import load_pipeline
    from p4.switch.switch import EmbeddedSwitch

    config = _build_config(args)
    defines = {}
    for d in getattr(args, "define", []):
        name, _, value = d.partition("=")
        defines[name] = value or "1"
    pipeline = load_pipeline(args.program, device_id=args.device_id,
                             include_dirs=[Path(d) for d in getattr(args, "include", [])], defines=defines)
    for warning in pipeline.pipe.program.warnings:
        print(warning, file=sys.stderr)
    lines = read_command_file(args.commands) if args.commands else []
    switch = EmbeddedSwitch(pipeline, config)
    grpc_server = None
    try:
        for lineno, line in enumerate(lines, 1):
            text = line.strip()
            if text and not text.startswith("#"):
                try:
                    switch.execute(text)
                except P4Error as exc:
                    raise SwitchArgumentError(f"{args.commands}:{lineno}: {exc}") from None
        if args.grpc_port:
            from p4.runtime.server import P4RuntimeServer, grpc_listen_address

            grpc_server = P4RuntimeServer(switch, grpc_listen_address(args.grpc_port),
                                          Path(args.program).read_bytes())
        switch.install_signal_handlers()
        print("ready", flush=True)
        switch.run()
    finally:
        if grpc_server is not None:
            grpc_server.close()
        switch.close()
    return 0


def run_cli(args: argparse.Namespace) -> int:
    """Run ``-c`` commands, or a command file from stdin, or an interactive shell on a terminal."""
    from p4.switch.control import ControlClient
    from p4.switch.shell import interactive, run_script

    with ControlClient(args.ctl) as client:
        if args.commands:
            failures = run_script(client, args.commands, sys.stdout, sys.stderr)
        elif sys.stdin.isatty():
            return interactive(client)
        else:
            try:
                failures = run_script(client, sys.stdin, sys.stdout, sys.stderr)
            except UnicodeDecodeError as exc:
                raise SwitchArgumentError(f"stdin: byte 0x{exc.object[exc.start]:02x} is not UTF-8; commands are "
                                          "UTF-8 text") from None
    if failures:
        print(f"{failures} command(s) failed", file=sys.stderr)
        return 2
    return 0

"""v1model externs and packet I/O: extract/emit, hash/checksum/digest data lists, extern methods."""

from __future__ import annotations

from typing import Any

from p4 import algorithms
from p4.compiler.context import CompilerContext
from p4.compiler.ir import INFINT, VOID, E, Ref, Sym
from p4.program import (
    CLONE_FL,
    CLONE_SESSION,
    DIGESTS,
    DROP_PORT,
    NO_FIELD_LIST,
    PAYLOAD,
    RECIRC_FL,
    RESUBMIT_FL,
    TRUNCATE,
    DigestLayout,
)
from p4.types import (
    BitT,
    BoolT,
    EnumT,
    ErrorT,
    InfIntT,
    ListT,
    P4Type,
    StackT,
    StringT,
    StructLike,
    VarbitT,
    bit_width,
)


class ExternCalls(CompilerContext):
    """Code for packet_in/packet_out and for the v1model extern functions and objects."""

    def extract(self, ref: Ref, node: Any, var_len: str | None = None) -> None:
        t = ref.type
        assert isinstance(t, StructLike)
        nb = t.width_bits // 8
        base = ref.base
        if isinstance(base, str):
            b = self.fresh("h")
            self.out(f"{b} = {base}")
            base = b
        if var_len is not None:
            vname, vt = t.fields[-1]
            vl = self.fresh("vl")
            self.out(f"{vl} = {var_len}")
            self.out(f"if {vl} > {vt.max_width}: raise _PE({self.err_code('HeaderTooShort')})")
            self.out(f"if {vl} % 8: raise _PE({self.err_code('ParserInvalidArgument')})")
            self.out(f"if o + {nb} + ({vl} >> 3) > n: raise _PE({self.errors.index('PacketTooShort')})")
            vslot = self.slot(base, t.offsets[vname])
            self.out(f"S[{vslot}] = int.from_bytes(pkt[o+{nb}:o+{nb}+({vl} >> 3)], 'big'); "
                     f"S[{vslot}+1] = {vl}")
        self.out(f"if o + {nb} > n: raise _PE({self.errors.index('PacketTooShort')})")
        v = self.fresh("v")
        self.out(f"{v} = int.from_bytes(pkt[o:o+{nb}], 'big')")
        shift = t.width_bits
        parts = [f"S[{self.slot(base, 0)}] = True"] if t.is_header else []
        for off, ft in t.wire_leaves():
            if isinstance(ft, VarbitT):
                continue
            w = bit_width(ft)
            shift -= w
            src = f"{v} >> {shift}" if shift else v
            if shift + w < t.width_bits:
                src = f"({src}) & {(1 << w) - 1}"
            if isinstance(ft, BitT) and ft.signed:
                src = f"_sgn({src}, {w})"
            elif isinstance(ft, BoolT):
                src = f"bool({src})"
            parts.append(f"S[{self.slot(base, off)}] = {src}")
        for p in parts:
            self.out(p)
        self.out(f"o += {nb}" + (f" + ({vl} >> 3)" if var_len is not None else ""))

    @staticmethod
    def slot(base: int | str, k: int) -> str:
        if isinstance(base, int):
            return str(base + k)
        return f"{base}+{k}" if k else str(base)

    def emit(self, e: E, node: Any) -> None:
        t = e.type
        if e.ref is None:
            raise self.err(node, f"emit needs a header, stack or struct of headers, not {t}")
        if isinstance(t, StructLike) and t.is_header:
            base = e.ref.base
            nb = t.width_bits // 8
            terms, shift = [], t.width_bits
            tail = ""
            for off, ft in t.wire_leaves():
                if isinstance(ft, VarbitT):
                    vs = self.slot(base, off)
                    tail = f" + S[{vs}].to_bytes(S[{vs}+1] >> 3, 'big')"
                    continue
                w = bit_width(ft)
                shift -= w
                s = f"S[{self.slot(base, off)}]"
                if (isinstance(ft, BitT) and ft.signed) or isinstance(ft, BoolT):
                    s = f"({s} & {(1 << w) - 1})" if not isinstance(ft, BoolT) else f"int({s})"
                terms.append(f"({s} << {shift})" if shift else s)
            fixed = f"({' | '.join(terms)}).to_bytes({nb}, 'big')" if terms else "b''"
            self.out(f"if S[{self.slot(base, 0)}]: out.append({fixed}{tail})")
        elif isinstance(t, StructLike):
            for fname, _ in t.fields:
                r = e.ref.field(fname)
                self.emit(E("None", r.type, ref=r), node)
        elif isinstance(t, StackT):
            for i in range(t.count):
                r = Ref(e.ref.off(1 + i * t.elem.size), t.elem)
                self.emit(E("None", t.elem, ref=r), node)
        else:
            raise self.err(node, f"emit needs a header, stack or struct of headers, not {t}")

    # --- data lists (hash, checksum, digest) --------------------------------------------------------------
    def flatten(self, e: E, node: Any) -> list[tuple[str, int | str, str]]:
        """Scalar (source, width, name) terms of a field list / struct / header, in order; a varbit field's
        width is its current length (Python source), as BMv2 feeds it to hashes and checksums."""
        if isinstance(e.type, ListT):
            out = []
            for item in e.const:
                out.extend(self.flatten(item, node))
            return out
        if isinstance(e.type, StructLike) and e.ref is not None:
            out = []
            for fname, ft in e.type.fields:
                r = e.ref.field(fname)
                sub = self.flatten(E(r.src if ft.scalar else "None", ft, ref=r), node)
                out.extend((s, w, fname if len(sub) == 1 else f"{fname}.{n}") for s, w, n in sub)
            return out
        if isinstance(e.type, BitT):
            s = f"({e.src} & {e.type.mask})" if e.type.signed else e.src
            return [(s, e.type.width, "")]
        if isinstance(e.type, BoolT):
            return [(f"int({e.src})", 1, "")]
        if isinstance(e.type, EnumT) and e.type.base is not None:
            return [(e.src, e.type.base.width, "")]
        if isinstance(e.type, VarbitT) and e.ref is not None:
            return [(f"S[{e.ref.off(0)}]", f"S[{e.ref.off(1)}]", "")]
        if isinstance(e.type, InfIntT):
            raise self.err(node, "an untyped integer in a field list has no width; cast it, e.g. (bit<8>)1")
        raise self.err(node, f"{e.type} cannot be part of a field list")

    def pack(self, terms: list[tuple[str, int | str, str]]) -> tuple[str, int | str]:
        """The terms as one integer (the first in the high bits) and its width in bits: an int, or Python
        source when a varbit's current length is among the widths."""
        if all(isinstance(w, int) for _, w, _ in terms):
            total = sum(int(w) for _, w, _ in terms)
            parts, shift = [], total
            for s, w, _ in terms:
                shift -= int(w)
                parts.append(f"({s} << {shift})" if shift else s)
            return ("(" + " | ".join(parts) + ")") if parts else "0", total
        parts = []
        for i, (s, _, _) in enumerate(terms):
            after = [str(w) for _, w, _ in terms[i + 1:]]
            parts.append(f"({s} << ({' + '.join(after)}))" if after else s)
        return "(" + " | ".join(parts) + ")", "(" + " + ".join(str(w) for _, w, _ in terms) + ")"

    @staticmethod
    def csum16_words(val: str, nbits: int | str) -> str:
        """``val`` of ``nbits`` bits padded with zeros to whole 16-bit words (the ones'-complement sum's input)."""
        if isinstance(nbits, int):
            return f"({val} << {16 - nbits % 16})" if nbits % 16 else val
        return f"({val} << (-{nbits} % 16))"

    # --- extern functions and methods ---------------------------------------------------------------------
    def algo_name(self, n: Any) -> str:
        e = self.expr(n)
        if isinstance(e.type, EnumT) and e.type.name == "HashAlgorithm":
            return next(k for k, v in e.type.members.items() if v == e.const)
        raise self.err(n, f"expected a HashAlgorithm, got {e.type}")

    def out_ref(self, n: Any, what: str) -> Ref:
        e = self.expr(n)
        if e.ref is None or not e.type.scalar:
            raise self.err(n, f"{what} must be a writable bit<N> field or variable")
        return e.ref

    def extern_func(self, fname: str, args: list, node: Any) -> E:
        sm = self.sm_slots
        nargs = len(args)

        def need(k: int | tuple[int, ...]) -> None:
            ks = (k,) if isinstance(k, int) else k
            if nargs not in ks:
                raise self.err(node, f"{fname} takes {' or '.join(map(str, ks))} arguments, got {nargs}")

        if fname == "mark_to_drop":
            need((0, 1))
            self.out(f"S[{sm['egress_spec']}] = {DROP_PORT}; S[{sm['mcast_grp']}] = 0")
        elif fname == "verify":
            need(2)
            c = self.expect_bool(args[0])
            err = self.expr(args[1])
            if not isinstance(err.type, ErrorT):
                raise self.err(args[1], f"verify's second argument must be an error, not {err.type}")
            self.out(f"if not {c.src}: raise _PE({err.src})")
        elif fname == "hash":
            need(5)
            dst = self.out_ref(args[0], "hash result")
            algo = self.algo_name(args[1])
            if algo not in algorithms.HASHES:
                raise self.err(args[1], f"hash algorithm {algo} is not supported (use one of "
                                        f"{', '.join(algorithms.HASHES)})")
            base = self.expr(args[2], dst.type)
            data = self.flatten(self.expr(args[3]), args[3])
            mx = self.expr(args[4], dst.type)
            val, nbits = self.pack(data)
            h = f"_alg.{algo}(_alg.to_bytes({val}, {nbits}))"
            mask = dst.type.mask if isinstance(dst.type, BitT) else (1 << 64) - 1
            self.out(f"_m = {mx.src}")
            self.out(f"{dst.src} = ({base.src} + ({h} % _m if _m else 0)) & {mask}")
        elif fname == "random":
            need(3)
            dst = self.out_ref(args[0], "random result")
            lo, hi = self.expr(args[1], dst.type), self.expr(args[2], dst.type)
            self.out(f"{dst.src} = _rng.randint(min({lo.src}, {hi.src}), max({lo.src}, {hi.src}))")
        elif fname in ("update_checksum", "update_checksum_with_payload", "verify_checksum",
                       "verify_checksum_with_payload"):
            need(4)
            c = self.expect_bool(args[0])
            data = self.flatten(self.expr(args[1]), args[1])
            ck = self.expr(args[2])
            algo = self.algo_name(args[3])
            val, nbits = self.pack(data)
            payload = fname.endswith("_with_payload")
            if algo == "csum16" and not payload:
                val = self.csum16_words(val, nbits)
                # RFC 1071 sum of 16-bit words == value mod 0xFFFF (2**16 = 1 mod 0xFFFF), inlined
                comp = f"(65535 - _r if (_r := (_v := {val}) % 65535) else (0 if _v else 65535))"
            else:
                if algo not in algorithms.HASHES:
                    raise self.err(args[3], f"checksum algorithm {algo} is not supported")
                data_b = f"_alg.to_bytes({val}, {nbits})" + (f" + S[{PAYLOAD}]" if payload else "")
                comp = f"_alg.{algo}({data_b})"
            if not isinstance(ck.type, BitT) or ck.ref is None:
                raise self.err(args[2], "checksum field must be a bit<N> field")
            comp = f"({comp} & {ck.type.mask})"
            if fname.startswith("update"):
                self.out(f"if {c.src}: {ck.ref.src} = {comp}")
            else:
                self.out(f"if {c.src} and {ck.src} != {comp}: S[{sm['checksum_error']}] = 1")
        elif fname == "digest":
            need(2)
            recv = self.expr(args[0], BitT(32))
            data = self.expr(args[1])
            terms = self.flatten(data, args[1])
            if not all(isinstance(w, int) for _, w, _ in terms):
                raise self.err(args[1], "a varbit field cannot be part of a digest on this target")
            targs = self.call_type_args
            self.call_type_args = []
            names = [n or f"f{i}" for i, (_, _, n) in enumerate(terms)]
            tname = str(data.type)
            if targs and isinstance(targs[0], StructLike):
                st_ = targs[0]
                tname = st_.name
                if isinstance(data.type, ListT):
                    if len(st_.fields) != len(terms):
                        raise self.err(args[1], f"digest data has {len(terms)} values, {st_.name} has "
                                                f"{len(st_.fields)} fields")
                    names = [f for f, _ in st_.fields]
                    terms = [(f"({s_} & {bit_width(ft) and (1 << bit_width(ft)) - 1})", bit_width(ft), f)
                             for (s_, _, _), (f, ft) in zip(terms, st_.fields, strict=True)]
            lay = DigestLayout(tname, [(nm, w) for nm, (_, w, _) in zip(names, terms, strict=True)])
            self.digest_layouts.append(lay)
            k = len(self.digest_layouts) - 1
            vals = "(" + "".join(s + ", " for s, _, _ in terms) + ")"
            self.out(f"if S[{DIGESTS}] is None: S[{DIGESTS}] = []")
            self.out(f"S[{DIGESTS}].append(({recv.src}, {k}, {vals}))")
        elif fname in ("clone", "clone3", "clone_preserving_field_list"):
            need({"clone": 2, "clone3": 3, "clone_preserving_field_list": 3}[fname])
            self.expr(args[0])
            sess = self.expr(args[1], BitT(32))
            fl = NO_FIELD_LIST
            if fname == "clone_preserving_field_list":
                fl = self.const_value(self.expr(args[2]), INFINT, node).const
                self.field_list(fl, node)
            elif fname == "clone3":
                fl = self.legacy_field_list(args[2])
            self.out(f"S[{CLONE_SESSION}] = {sess.src}; S[{CLONE_FL}] = {fl}")
        elif fname in ("resubmit", "recirculate", "resubmit_preserving_field_list",
                       "recirculate_preserving_field_list"):
            need(1)
            slot = RESUBMIT_FL if fname.startswith("resubmit") else RECIRC_FL
            if fname.endswith("field_list"):
                fl = self.const_value(self.expr(args[0]), INFINT, node).const
                self.field_list(fl, node)
            else:
                fl = self.legacy_field_list(args[0])
            self.out(f"S[{slot}] = {fl}")
        elif fname == "truncate":
            need(1)
            ln = self.expr(args[0], BitT(32))
            self.out(f"S[{TRUNCATE}] = {ln.src}")
        elif fname in ("assert", "assume"):
            need(1)
            c = self.expect_bool(args[0])
            self.out(f"if not {c.src}: raise _AssertFailed({str(self.pos(node))!r})")
        elif fname == "log_msg":
            need((1, 2))
            msg = self.expr(args[0])
            if not isinstance(msg.type, StringT):
                raise self.err(args[0], "log_msg needs a string literal")
            vals = "()"
            if nargs == 2:
                terms = self.flatten(self.expr(args[1]), args[1])
                vals = "(" + "".join(s + ", " for s, _, _ in terms) + ")"
            self.out(f"_log.append(({msg.src}, {vals}))")
        else:
            raise self.err(node, f"extern function '{fname}' is not supported by this target")
        return E("None", VOID)

    def field_list(self, idx: int, node: Any) -> list[int]:
        if idx not in self.field_lists:
            slots: list[int] = []
            meta_t = self.meta_ref.type
            self._collect_fl(self.meta_ref, meta_t, idx, slots)
            self.field_lists[idx] = slots
        return self.field_lists[idx]

    def _collect_fl(self, ref: Ref, t: P4Type, idx: int, out: list[int]) -> None:
        if not isinstance(t, StructLike):
            return
        for fname, ft in t.fields:
            anns = t.annotations.get(fname, {})
            r = ref.field(fname)
            if "field_list" in anns and idx in anns["field_list"]:
                out.extend(range(int(r.base), int(r.base) + ft.size))
            elif isinstance(ft, StructLike):
                self._collect_fl(r, ft, idx, out)

    def legacy_field_list(self, n: Any) -> int:
        e = self.expr(n)
        slots: list[int] = []

        def walk(x: E) -> None:
            if isinstance(x.type, ListT):
                for it in x.const:
                    walk(it)
            elif x.ref is not None and isinstance(x.ref.base, int):
                slots.extend(range(x.ref.base, x.ref.base + x.type.size))
            else:
                raise self.err(n, "field list entries must be fields or structs")
        walk(e)
        idx = 1000 + len(self.field_lists)
        self.field_lists[idx] = slots
        return idx

    def extern_method(self, sym: Sym, method: str, args: list, node: Any) -> E:
        inst = sym.value
        kind, obj, var = inst["kind"], inst["obj"], inst["var"]
        plen = f"S[{self.sm_slots['packet_length']}]"
        direct = getattr(obj, "direct", False)
        arity = {("register", "read"): (1, 2), ("register", "write"): (2,),
                 ("counter", "count"): (0,) if direct else (1,), ("meter", "execute_meter"): (2,),
                 ("meter", "read"): (1,), ("Checksum16", "get"): (1,)}.get((kind, method))
        if arity is not None and len(args) not in arity:
            raise self.err(node, f"{kind}.{method} takes {' or '.join(map(str, arity))} arguments, "
                                 f"got {len(args)}")
        if kind == "register":
            if method == "read":
                if len(args) == 2:
                    dst = self.out_ref(args[0], "register read result")
                    i = self.expr(args[1], BitT(32))
                    self.out(f"{dst.src} = {var}.values[{i.src}] if {i.src} < {obj.size} else 0")
                    return E("None", VOID)
                i = self.expr(args[0], BitT(32))
                return E(f"({var}.values[{i.src}] if {i.src} < {obj.size} else 0)", inst["elem"])
            if method == "write":
                i = self.expr(args[0], BitT(32))
                v = self.coerce(self.expr(args[1], inst["elem"]), inst["elem"])
                self.out(f"if {i.src} < {obj.size}: {var}.values[{i.src}] = {v.src}")
                return E("None", VOID)
        elif kind == "counter":
            if method == "count":
                if obj.direct:
                    return E("None", VOID)  # direct counters count in the table apply
                i = self.expr(args[0], BitT(32))
                self.out(f"{var}.count({i.src}, {plen})")
                return E("None", VOID)
        elif kind == "meter":
            if method == "execute_meter" and not obj.direct:
                i = self.expr(args[0], BitT(32))
                dst = self.out_ref(args[1], "meter result")
                self.out(f"{dst.src} = {var}.execute({i.src}, {plen}, _now_us())")
                return E("None", VOID)
            if method == "read" and obj.direct:
                dst = self.out_ref(args[0], "meter result")
                self.out(f"{dst.src} = S[{inst['slot']}]")
                return E("None", VOID)
        elif kind == "Checksum16" and method == "get":
            terms = self.flatten(self.expr(args[0]), args[0])
            val, nbits = self.pack(terms)
            return E(f"_csum16({self.csum16_words(val, nbits)})", BitT(16))
        raise self.err(node, f"{kind} has no method '{method}' here")

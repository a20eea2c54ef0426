"""Build the C data path (``datapath.c``) with the system C compiler through cffi, cached by source hash.

The extension lands in ``$XDG_CACHE_HOME/starpulse/native/<hash>/`` (default ``~/.cache``), built once per
source text and Python version, and is imported from there.  No compiler (or no cffi): ``load()`` returns None
and warns once in one line, so callers fall back to the Python path.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("datapath.c")
CDEF = """
uint32_t sp_crc32(const uint8_t *p, size_t n, uint32_t crc);
int sp_build(const uint8_t *tmpl, size_t len, uint32_t psn0, int count, uint8_t *out);
int sp_tx_burst(int fd, const uint8_t *tmpl, size_t len, uint32_t psn0, int count, uint8_t *scratch);
int sp_rx_check(const uint8_t *f, size_t n);
int sp_rx_burst(int fd, uint8_t *buf, int max, uint64_t *counts);
int sp_send_frames(int fd, const uint8_t *buf, const uint32_t *lens, int count);
int sp_enable_rx_stamps(int fd);
int sp_nic_verdict(const uint8_t *f, size_t n);
int sp_rx_frames(int fd, uint8_t *buf, int max, uint32_t *lens, uint8_t *types, uint8_t *verdicts, int64_t *stamps);
"""
MAX_BATCH = 256          # datapath.c's MAX_BATCH: frames per sp_tx_burst / sp_rx_burst
RX_FRAME_CAP = 16384     # datapath.c's RX_FRAME_CAP: bytes of receive buffer per frame
_cached: dict[str, ModuleType | None] = {}


class NativeUnavailable(RuntimeError):
    """The native data path cannot be built here (no cffi, no C compiler); says why."""


def cache_dir() -> Path:
    """Where built extensions are kept: ``$XDG_CACHE_HOME/starpulse/native`` (default ``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "starpulse" / "native"


def _module_name(source: str) -> str:
    tag = sysconfig.get_config_var("SOABI") or sys.version
    digest = hashlib.sha256((source + CDEF + tag).encode()).hexdigest()[:16]
    return f"_sp_datapath_{digest}"


def build() -> ModuleType:
    """The compiled extension module (``.ffi``, ``.lib``), built now unless cached; NativeUnavailable if not."""
    source = SOURCE.read_text()
    name = _module_name(source)
    out = cache_dir() / name
    found = sorted(out.glob(f"{name}*.so")) if out.is_dir() else []
    if not found:
        try:
            import cffi
        except ImportError as exc:
            raise NativeUnavailable(f"cffi is not installed ({exc})") from None
        ffi = cffi.FFI()
        ffi.cdef(CDEF)
        ffi.set_source(name, source, extra_compile_args=["-O2"])
        tmp = out / f"build-{os.getpid()}"   # processes building at once never write the same file
        tmp.mkdir(parents=True, exist_ok=True)
        try:
            built = Path(ffi.compile(tmpdir=str(tmp), verbose=False))
            found = [out / built.name]
            os.replace(built, found[0])        # atomic: an importer sees the whole library or none
        except Exception as exc:  # cffi raises VerificationError/CompileError/OSError when no compiler runs
            raise NativeUnavailable(f"C compiler failed: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    spec = importlib.util.spec_from_file_location(name, found[0])
    if spec is None or spec.loader is None:
        raise NativeUnavailable(f"cannot import {found[0]}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> ModuleType | None:
    """The extension, or None with one warning line (once per process) when it cannot be built."""
    if "mod" not in _cached:
        try:
            _cached["mod"] = build()
        except NativeUnavailable as exc:
            print(f"warning: native data path unavailable, using the Python path: {exc}", file=sys.stderr)
            _cached["mod"] = None
    return _cached["mod"]

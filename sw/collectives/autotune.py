"""Online auto-tune (TCCL's "auto-tune network expert"): the communicator times every (collective, size bucket,
algorithm, chunk) it runs and moves to the fastest observed one.

Bounded exploration: each candidate of a bucket (the alpha-beta prior's choice first, then every other algorithm
the layout runs, then the prior's algorithm with 4x and 1/4 the chunk) runs ``PROBES`` times, then the fastest
mean is exploited; every ``REPROBE_EVERY`` exploited calls of a bucket one other candidate is probed again.
Every rank makes the same choice: choices are made on the communicator's stream (issue order), probe times are
the maximum over ranks (a tiny allreduce after each probe), and the table rank 0 loaded from disk is broadcast at
the first tuned call.  The table is kept per topology and link rates under the user's cache directory.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import CollectiveUserError
from .tuner import MAX_CHUNK_BYTES, MIN_CHUNK_BYTES, Tuner

ENV_AUTOTUNE = "STARPULSE_AUTOTUNE"
"""'on', 'off' (default: the model's choice only, so a job's choices stay deterministic unless asked) or 'reset'
(forget the stored table of this topology, then tune)."""
ENV_AUTOTUNE_DIR = "STARPULSE_AUTOTUNE_DIR"
"""Directory of the tuning tables (default ``$XDG_CACHE_HOME/starpulse/autotune``, ``~/.cache/...``)."""
MODES = ("on", "off", "reset")
PROBES = 2
REPROBE_EVERY = 50
MEAN_WINDOW = 8
"""A re-probed candidate's mean weighs its last samples about this many deep (an exponential mean)."""
CHUNK_FACTORS = (4.0, 0.25)


def parse_autotune_env(raw: str) -> str:
    """$STARPULSE_AUTOTUNE: on, off or reset (also 1/0)."""
    text = raw.strip().lower()
    text = {"1": "on", "0": "off", "yes": "on", "no": "off", "true": "on", "false": "off"}.get(text, text)
    if text not in MODES:
        raise CollectiveUserError(f"${ENV_AUTOTUNE}={raw!r}: expected one of {', '.join(MODES)}")
    return text


def size_bucket(nbytes: int) -> int:
    """The power of two at or above ``nbytes`` (calls of one bucket share their timings)."""
    return 1 << max(0, int(nbytes) - 1).bit_length()


def table_dir(env: dict[str, str]) -> Path:
    """Where the tuning tables live: $STARPULSE_AUTOTUNE_DIR, else the user's cache directory."""
    if env.get(ENV_AUTOTUNE_DIR, "").strip():
        return Path(env[ENV_AUTOTUNE_DIR].strip())
    cache = env.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "starpulse" / "autotune"


def topology_key(tuner: Tuner) -> str:
    """The table's key: servers x GPUs per server and the link classes' rates and latencies of the prior."""
    m = tuner.model
    links = ",".join(f"{name}={c.rate_bps:.6g}b/{c.alpha_s:.3g}s"
                     for name, c in (("intra", m.intra), ("inter", m.inter), ("cross", m.cross_link)))
    layout = tuner.layout
    return f"{len(layout.servers)}x{layout.gpus_per_server}{'' if layout.uniform else '-uneven'} {links}"


@dataclass
class Stat:
    """Samples of one candidate in one bucket: how many and their (exponential) mean in network seconds."""

    n: int = 0
    mean_s: float = 0.0

    def add(self, seconds: float) -> None:
        self.n += 1
        self.mean_s += (seconds - self.mean_s) / min(self.n, MEAN_WINDOW)


def _cand_key(algo: str, chunk: int) -> str:
    return f"{algo}/{chunk}"


class AutoTuner:
    """The tuning table of one communicator and the rule that picks each tuned call's (algorithm, chunk)."""

    def __init__(self, tuner: Tuner, rank: int, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        raw = env.get(ENV_AUTOTUNE, "").strip()
        self.mode = parse_autotune_env(raw) if raw else "off"
        self.tuner = tuner
        self.rank = rank
        self.key = topology_key(tuner)
        self.path = table_dir(env) / f"topo-{hashlib.sha1(self.key.encode()).hexdigest()[:12]}.json"
        self.table: dict[str, dict[str, Stat]] = {}
        self.calls: dict[str, int] = {}
        self.shared = False          # rank 0's stored table has reached every rank
        if self.enabled and self.mode != "reset" and rank == 0:
            self.table = self._read()

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    # --- the table on disk -----------------------------------------------------------------------------------
    def _read(self) -> dict[str, dict[str, Stat]]:
        """The stored table of this topology (empty when there is none or it is not ours/unreadable)."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("key") != self.key:
            return {}
        return self.decode(data.get("buckets", {}))

    def save(self) -> None:
        """Write the table (rank 0 only; atomically, so a reader never sees half a file)."""
        if not self.enabled or self.rank != 0:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({"key": self.key, "buckets": self.encode()}, indent=1, sort_keys=True))
            tmp.replace(self.path)
        except OSError:
            pass   # a read-only cache costs the next run its exploration, not this run its result

    def encode(self) -> dict[str, dict[str, list[float]]]:
        return {b: {c: [s.n, s.mean_s] for c, s in cands.items()} for b, cands in self.table.items()}

    @staticmethod
    def decode(data: Any) -> dict[str, dict[str, Stat]]:
        out: dict[str, dict[str, Stat]] = {}
        if not isinstance(data, dict):
            return out
        for bucket, cands in data.items():
            if isinstance(cands, dict):
                out[str(bucket)] = {str(c): Stat(int(v[0]), float(v[1])) for c, v in cands.items()
                                    if isinstance(v, list) and len(v) == 2}
        return out

    # --- choices ---------------------------------------------------------------------------------------------
    def candidates(self, coll: str, nbytes: int, chunk_override: int | None) -> list[tuple[str, int]]:
        """The prior's (algorithm, chunk) first, then the layout's other algorithms at their model chunk, then the
        prior's algorithm with CHUNK_FACTORS x its chunk (only ``chunk_override`` when one is given)."""
        t = self.tuner
        prior = t.algo(coll, nbytes)
        algos = [prior] + [a for a in t.available(coll) if a != prior]
        out = [(a, t.chunk_bytes(coll, a, nbytes, chunk_override)) for a in algos]
        if chunk_override is None and t.env_chunk is None:
            base = out[0][1]
            for f in CHUNK_FACTORS:
                c = int(min(MAX_CHUNK_BYTES, max(MIN_CHUNK_BYTES, base * f)))
                if (prior, c) not in out:
                    out.append((prior, c))
        return out

    def pick(self, coll: str, nbytes: int, chunk_override: int | None) -> tuple[str, int, bool]:
        """(algorithm, chunk bytes, probe?) of the next call of ``coll`` on ``nbytes``: an under-sampled candidate
        (probe), else the fastest one, re-probing another every REPROBE_EVERY calls."""
        bucket = f"{coll}/{size_bucket(nbytes)}"
        stats = self.table.setdefault(bucket, {})
        cands = self.candidates(coll, nbytes, chunk_override)
        for algo, chunk in cands:
            if stats.get(_cand_key(algo, chunk), Stat()).n < PROBES:
                return algo, chunk, True
        self.calls[bucket] = calls = self.calls.get(bucket, 0) + 1
        ranked = sorted(cands, key=lambda c: stats[_cand_key(*c)].mean_s)
        if calls % REPROBE_EVERY == 0 and len(ranked) > 1:
            algo, chunk = ranked[1 + (calls // REPROBE_EVERY) % (len(ranked) - 1)]
            return algo, chunk, True
        return ranked[0][0], ranked[0][1], False

    def record(self, coll: str, nbytes: int, algo: str, chunk: int, seconds: float) -> None:
        """Add one probe's time (the same on every rank: the maximum over ranks) and store the table."""
        bucket = f"{coll}/{size_bucket(nbytes)}"
        self.table.setdefault(bucket, {}).setdefault(_cand_key(algo, chunk), Stat()).add(seconds)
        self.save()

    def choices(self) -> list[dict[str, Any]]:
        """Per bucket: the fastest candidate so far, its mean time, samples taken and whether exploring is over."""
        out = []
        for bucket, stats in sorted(self.table.items(), key=lambda kv: (kv[0].split("/")[0],
                                                                         int(kv[0].split("/")[1]))):
            if not stats:
                continue
            best = min(stats, key=lambda c: stats[c].mean_s)
            algo, chunk = best.rsplit("/", 1)
            coll, size = bucket.split("/")
            out.append({"op": coll, "bucket_bytes": int(size), "algo": algo, "chunk_bytes": int(chunk),
                        "mean_s": stats[best].mean_s, "samples": sum(s.n for s in stats.values()),
                        "candidates": {c: s.mean_s for c, s in sorted(stats.items())}})
        return out


def choice_lines(choices: list[dict[str, Any]] | None) -> list[str]:
    """Text lines of ``AutoTuner.choices()`` for bench and train output (none when auto-tune was off)."""
    if choices is None:
        return []
    if not choices:
        return ["# autotune: on, no tuned call yet"]
    return [f"# autotune: {c['op']} <= {c['bucket_bytes']} B -> {c['algo']} chunk {c['chunk_bytes']} B "
            f"({c['mean_s'] * 1e3:.3f} ms mean, {c['samples']} samples over {len(c['candidates'])} candidates)"
            for c in choices]

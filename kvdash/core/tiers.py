"""KV tiers below the GPU: how big they are in chunks and tokens, and how long a transfer takes.

Pure formulas, shared by ``kvdash calc --offload`` and ``kvdash simulate``'s tiered replay.

vLLM 0.33.0 native offloading (``--kv-offloading-size``, ``vllm/v1/kv_offload/cpu/spec.py``,
``CPUOffloadingSpec.__init__``, lines 106-130): the CPU tier is ``cpu_bytes // round_up(bytes per GPU
block per worker x world_size x blocks_per_chunk, mmap.PAGESIZE)`` chunks (``num_copies`` is 1 instead of
the world size with the replicated layout); a chunk holds ``blocks_per_chunk`` GPU blocks (1 by default).

LMCache 0.5.6 (``lmcache/v1/config.py``: ``chunk_size`` 256 at line 90, ``save_unfull_chunk`` False at
line 385, ``save_decode_cache`` False at line 126): 256-token chunks of the prompt, partial tails never
stored; a tier of ``B`` bytes holds ``B // (chunk tokens x bytes per token, all ranks)`` chunks, the
arithmetic of LMCache's own simulator (``lmcache/tools/cache_simulator/simulator.py``,
``cache_capacity_bytes // kv_bytes_per_chunk``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kvdash.errors import InputError

PAGE_SIZE = 4096  # mmap.PAGESIZE on x86-64 and most aarch64 Linux kernels (vLLM's BLOCK_SIZE_ALIGNMENT)
LMCACHE_CHUNK = 256
TIERS = ("cpu", "disk")
DATA = Path(__file__).resolve().parent.parent / "data"


def round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


@dataclass(frozen=True)
class ChunkTier:
    """A tier sized in chunks: ``chunks`` of ``chunk_bytes`` (padding included), each holding
    ``chunk_tokens`` tokens."""

    rules: str  # "vllm" or "lmcache"
    size_bytes: int
    chunk_tokens: int
    unpadded_chunk_bytes: int
    chunk_bytes: int
    chunks: int

    @property
    def tokens(self) -> int:
        return self.chunks * self.chunk_tokens

    @property
    def used_bytes(self) -> int:
        return self.chunks * self.chunk_bytes


def vllm_cpu_tier(size_bytes: int, block_bytes_per_rank: int, world_size: int, block_size: int,
                  blocks_per_chunk: int = 1, page_size: int = PAGE_SIZE, replicated: bool = False) -> ChunkTier:
    """vLLM's CPU tier (``CPUOffloadingSpec.__init__``): ``size_bytes`` is ``--kv-offloading-size``,
    summed over the TP ranks.  Worked example (a test): Llama-3.1-70B, TP 8, bf16, block 16: 80 layers x
    2 x 1 KV head per rank x 128 x 2 B = 40,960 B per token per rank; x 16 = 655,360 B per block; x 8
    ranks = 5,242,880 B per chunk (a multiple of 4,096: no padding); 100 GiB // 5,242,880 = 20,480 chunks
    = 327,680 tokens."""
    copies = 1 if replicated else world_size
    raw = block_bytes_per_rank * copies * blocks_per_chunk
    aligned = round_up(raw, page_size)
    return ChunkTier("vllm", size_bytes, block_size * blocks_per_chunk, raw, aligned, size_bytes // aligned)


def lmcache_tier(size_bytes: int, bytes_per_token_all_ranks: int, chunk_tokens: int = LMCACHE_CHUNK) -> ChunkTier:
    """LMCache's tier: ``size_bytes // (chunk_tokens x bytes per token)`` chunks (LMCache's simulator)."""
    raw = chunk_tokens * bytes_per_token_all_ranks
    return ChunkTier("lmcache", size_bytes, chunk_tokens, raw, raw, size_bytes // raw if raw else 0)


def reload_blocks(tokens: int, chunk_tokens: int, full_only: bool) -> int:
    """Chunks a request of ``tokens`` prompt tokens stores (and reloads on a full hit): vLLM stores
    full chunks only (a chunk is stored once all its blocks are full); LMCache never stores a partial
    tail (``save_unfull_chunk`` False).  Both: ``tokens // chunk_tokens``; ``full_only`` False rounds up
    (the bytes of every allocated block, for comparison)."""
    return tokens // chunk_tokens if full_only else -(-tokens // chunk_tokens)


# --- links ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Link:
    key: str
    name: str
    bytes_per_s: int  # one direction
    source: str


def links() -> dict[str, Link]:
    raw = json.loads((DATA / "links.json").read_text(encoding="utf-8"))
    return {k: Link(key=k, **v) for k, v in raw["links"].items()}


def gpu_host_link(gpu: str | None) -> Link:
    """The GPU preset's host link (``kvdash/data/links.json``, each with its public source); PCIe
    Gen5 x16 when no preset is named (the link of H100/H200/B200-class servers)."""
    raw = json.loads((DATA / "links.json").read_text(encoding="utf-8"))
    key = raw["gpu_host_link"].get(gpu or "", "pcie5-x16")
    return links()[key]


def parse_link(text: str, field: str) -> Link:
    """A link name of ``kvdash/data/links.json`` or a bandwidth such as ``25GB/s`` / ``12GiB/s``."""
    import re

    from kvdash.units import parse_size

    table = links()
    if text in table:
        return table[text]
    allowed = ("expected one of " + ", ".join(table) + " or a positive bandwidth such as 25GB/s, 12GiB/s or "
               "200Gb/s (bits: Gb, Gbit)")
    body = text[:-2].strip() if text.endswith("/s") else ""
    if not body:
        raise InputError(field, text, allowed)
    bits = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([kMGT]?)(b|bit)", body)
    if bits:  # network links are quoted in bits per second: 25Gb/s is 3.125 GB/s, not 25 GB/s
        value = int(float(bits.group(1)) * 10 ** (3 * " kMGT".index(bits.group(2) or " ")) / 8)
    else:
        try:
            value = parse_size(body, field)
        except InputError:
            raise InputError(field, text, allowed) from None
    if value <= 0:
        raise InputError(field, text, allowed)
    return Link(text, f"{text} (given)", value, "given on the command line")


def transfer_seconds(nbytes: int, link: Link) -> float:
    """Time to move ``nbytes`` over ``link`` at its one-direction bandwidth: a lower bound (no latency,
    no protocol overhead beyond what the bandwidth figure already counts)."""
    return nbytes / link.bytes_per_s


def parse_offload(text: str, field: str = "--offload") -> dict[str, int | None]:
    """``cpu:100GiB`` or ``cpu:100GiB,disk:2TiB``: bytes per tier (GiB = 2^30 B, GB = 10^9 B); ``inf``
    (unbounded, None) is allowed for the disk tier (vLLM's filesystem tier evicts nothing).  ``disk``
    needs ``cpu`` (vLLM's secondary tiers sit behind the CPU tier; LMCache's local disk behind its
    CPU backend)."""
    from kvdash.units import parse_size

    out: dict[str, int | None] = {}
    allowed = "expected cpu:SIZE or cpu:SIZE,disk:SIZE (for example cpu:100GiB,disk:2TB; disk:inf)"
    for part in str(text).split(","):
        name, sep, size = part.strip().partition(":")
        if not sep or name not in TIERS or name in out:
            raise InputError(field, text, allowed)
        if name == "disk" and size.strip().lower() in ("inf", "unbounded"):
            out[name] = None
            continue
        value = parse_size(size.strip(), field)
        if value <= 0:
            raise InputError(field, text, "every tier size must be positive; " + allowed)
        out[name] = value
    if "disk" in out and "cpu" not in out:
        raise InputError(field, text, "a disk tier sits behind the CPU tier; " + allowed)
    return out


def offload_view(sizes: dict[str, int | None], block_bytes_per_rank: int, tp: int, block_size: int,
                 request_tokens: int, link: Link, disk_link: Link, rules: str = "vllm",
                 blocks_per_chunk: int = 1) -> dict[str, object]:
    """``kvdash calc --offload``: each tier's chunks and tokens, the bytes and time of reloading one
    request of ``request_tokens`` prompt tokens (its full chunks), and how many such requests' prefixes
    the tiers hold together.  The GPU-host link is per GPU (each rank moves its share); a disk tier is
    shared by the ranks and read through the CPU tier."""
    bytes_per_token_all = block_bytes_per_rank * tp // block_size
    tiers: dict[str, object] = {}
    chunk: ChunkTier | None = None
    held_total: int | None = 0
    for name in ("cpu", "disk"):
        if name not in sizes:
            continue
        size = sizes[name]
        if size is None:
            tiers[name] = {"size_bytes": None, "chunks": None, "tokens": None, "unbounded": True}
            held_total = None
            continue
        t = (vllm_cpu_tier(size, block_bytes_per_rank, tp, block_size, blocks_per_chunk) if rules == "vllm"
             else lmcache_tier(size, bytes_per_token_all))
        chunk = chunk or t
        tiers[name] = {"size_bytes": size, "chunk_tokens": t.chunk_tokens, "chunk_bytes": t.chunk_bytes,
                       "unpadded_chunk_bytes": t.unpadded_chunk_bytes, "chunks": t.chunks, "tokens": t.tokens,
                       "used_bytes": t.used_bytes, "unbounded": False}
    if chunk is None:  # only an unbounded disk: not allowed by parse_offload (disk needs cpu)
        raise InputError("--offload", sizes, "expected a CPU tier size")
    n = reload_blocks(request_tokens, chunk.chunk_tokens, True)
    nbytes = n * chunk.chunk_bytes
    per_rank = nbytes // tp
    cpu_s = per_rank / link.bytes_per_s
    held: dict[str, int | None] = {}
    for name, entry in tiers.items():
        assert isinstance(entry, dict)
        held[name] = None if entry["chunks"] is None else (entry["chunks"] // n if n else None)
        count = held[name]
        if held_total is not None and count is not None:
            held_total += count
    return {"rules": rules, "tiers": tiers, "request_tokens": request_tokens, "request_chunks": n,
            "request_stored_tokens": n * chunk.chunk_tokens, "request_bytes": nbytes,
            "request_bytes_per_rank": per_rank,
            "link": {"name": link.name, "bytes_per_s": link.bytes_per_s, "source": link.source},
            "disk_link": {"name": disk_link.name, "bytes_per_s": disk_link.bytes_per_s, "source": disk_link.source},
            "reload_cpu_s": cpu_s, "reload_disk_s": nbytes / disk_link.bytes_per_s + cpu_s if "disk" in tiers else None,
            "requests_held": held, "requests_held_total": held_total if n else None}

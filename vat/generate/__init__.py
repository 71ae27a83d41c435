"""Generation: text in, text out through the latent space.

- `decoding.py`   decode any latent sequence: greedy, beam, sampling, key/value cache
- `latents.py`    latent maths: perturb, prior lengths and draws, lerp/slerp, padding
- `generator.py`  VATGenerator: reconstruct, sample, resample a token, interpolate, prior
- `variation.py`  do samples vary? the near-deterministic posterior check (vat generate, vat train)
"""

from vat.generate.generator import (
    DecodeOptions,
    Hypothesis,
    ReconstructionScore,
    TruncationWarning,
    VATGenerator,
    corpus_bleu,
    reconstruction_score,
)

__all__ = [
    "DecodeOptions",
    "Hypothesis",
    "ReconstructionScore",
    "TruncationWarning",
    "VATGenerator",
    "corpus_bleu",
    "reconstruction_score",
]

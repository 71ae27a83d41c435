"""Generation, text in and text out: `decoding`, `latents` maths, the VATGenerator, `variation`."""

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

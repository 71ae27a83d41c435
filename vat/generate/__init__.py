"""Generation, text in and text out: decoding (`decoding`), latent maths (`latents`), the
VATGenerator (`generator`) and whether samples vary (`variation`)."""

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

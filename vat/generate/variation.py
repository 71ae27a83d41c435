"""Do variational samples vary? The near-deterministic posterior check.

The paper (Ferner & Wegenkittl 2022), "Generation": decoding z_t = mu_t + sigma_t * eps gives
paraphrase-like variants (the paper's Table 1), while z_t = mu_t is the deterministic decoding
used for reconstruction. When the posterior is so narrow, relative to what the decoder tells
apart, that every sample of z decodes to the same text as mu, and mu to the input, sampling is
reconstruction with extra steps: the model holds a rate (KL in nats per token) far above what
its decoder needs. That happens at a high rate, but not at one number: it depends on the
decoder as well as on sigma / s, the posterior's width against the prior's (a d = 64 demo at 35
nats per token and a root-mean-square sigma / s of 0.7 still repeated 42 of 50 samples). So the
criterion is measured on the outputs themselves:

    nearly deterministic  <=>  (samples whose decoding equals the mu-decoding) / samples >= 0.95

counted over the sentences whose mu-decoding is the input itself (at least `MIN_SAMPLES`
samples), decoded with the same options as the mu-decoding. Sentences the model does not
reconstruct are left out: identical samples there mean a decoder that ignores z (posterior
collapse, the opposite case), not a narrow posterior. Only texts are compared, so the check
holds for any decoder and any latent shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from vat.errors import OptionError

NEARLY_DETERMINISTIC = 0.95
"""Fraction of variational samples equal to the mu-decoding from which the posterior is
called nearly deterministic: at most one sample in twenty differs, a line that separates a
demo trained at a high rate from demos held at a few tens of nats per token (BENCHMARKS.md,
"Figures moved out of the code's comments")."""

MIN_SAMPLES = 4
"""Fewer samples say too little: one or two identical draws happen at any rate."""


class SampleAgreement(NamedTuple):
    identical: int  # samples whose text equals their sentence's mu-decoding
    total: int  # samples compared: those of the sentences whose mu-decoding is the input

    @property
    def fraction(self) -> float:
        """identical / total (0 for no samples)."""
        return self.identical / self.total if self.total else 0.0

    @property
    def nearly_deterministic(self) -> bool:
        """At least `MIN_SAMPLES` samples and a fraction of at least `NEARLY_DETERMINISTIC`
        equal to the mu-decoding."""
        return self.total >= MIN_SAMPLES and self.fraction >= NEARLY_DETERMINISTIC


def sample_agreement(
    samples: Sequence[Sequence[str]], means: Sequence[str], inputs: Sequence[str]
) -> SampleAgreement:
    """How many of `samples[i]` (the texts decoded from samples of sentence i's posterior)
    equal `means[i]` (the text decoded from its means mu), over the sentences i whose
    `means[i]` is `inputs[i]` (texts compared without outer white space). Pure."""
    for name, other in (("means", means), ("inputs", inputs)):
        if len(other) != len(samples):
            raise OptionError(
                name, f"has {len(other)} texts for {len(samples)} sentences; give one each"
            )
    kept = [(g, m.strip()) for g, m, x in zip(samples, means, inputs) if m.strip() == x.strip()]
    identical = sum(s.strip() == m for group, m in kept for s in group)
    return SampleAgreement(identical, sum(len(group) for group, _ in kept))


def deterministic_note(agreement: SampleAgreement, tau: float) -> str:
    """The sentence vat prints when `agreement.nearly_deterministic` (no prefix; the caller
    adds "note: " or "vat: ")."""
    return (
        f"the posterior is nearly deterministic: {agreement.identical} of {agreement.total} "
        f"variational samples (tau {tau:g}) of the sentences it reconstructs decode to the "
        "input again; a model trained at a lower rate (model.loss.target_kl, nats per token) "
        "gives varied samples"
    )


def measure_agreement(
    generator, sentences: Sequence[str], num_samples: int = 4, tau: float = 1.0, seed: int = 0
) -> SampleAgreement:
    """`sample_agreement` of `num_samples` greedy decodings of posterior samples of each
    sentence against its greedy mu-decoding, with a `vat.generate.VATGenerator`."""
    texts = list(sentences)
    samples = generator.sample(texts, num_samples, tau, seed=seed)
    return sample_agreement(samples, generator.reconstruct(texts), texts)

"""Do variational samples vary? The near-deterministic posterior check.

Decoding z_t = mu_t + sigma_t * eps gives paraphrase-like variants (the paper's Table 1).
When the posterior is so narrow, for what the decoder tells apart, that every sample decodes
to the same text as mu, sampling is reconstruction with extra steps. Since that depends on
the decoder as well as on sigma / s, it is measured on the outputs: nearly deterministic
when at least 95 % of the samples decode to the mu-decoding, counted over the sentences
whose mu-decoding is the input itself (elsewhere identical samples mean a decoder that
ignores z, posterior collapse, the opposite case).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from vat.errors import OptionError

NEARLY_DETERMINISTIC = 0.95  # at most one sample in twenty differs (BENCHMARKS.md)
MIN_SAMPLES = 4  # one or two identical draws happen at any rate


class SampleAgreement(NamedTuple):
    identical: int  # samples whose text equals their sentence's mu-decoding
    total: int  # samples compared: those of the sentences whose mu-decoding is the input

    @property
    def fraction(self) -> float:
        """identical / total (0 for no samples)."""
        return self.identical / self.total if self.total else 0.0

    @property
    def nearly_deterministic(self) -> bool:
        """At least MIN_SAMPLES samples, and NEARLY_DETERMINISTIC of them the mu-decoding."""
        return self.total >= MIN_SAMPLES and self.fraction >= NEARLY_DETERMINISTIC


def sample_agreement(
    samples: Sequence[Sequence[str]], means: Sequence[str], inputs: Sequence[str]
) -> SampleAgreement:
    """How many of `samples[i]` (decoded from samples of sentence i's posterior) equal
    `means[i]` (decoded from its mu), over the sentences whose `means[i]` is `inputs[i]`
    (compared without outer white space)."""
    for name, other in (("means", means), ("inputs", inputs)):
        if len(other) != len(samples):
            raise OptionError(
                name, f"has {len(other)} texts for {len(samples)} sentences; give one each"
            )
    kept = [(g, m.strip()) for g, m, x in zip(samples, means, inputs) if m.strip() == x.strip()]
    identical = sum(s.strip() == m for group, m in kept for s in group)
    return SampleAgreement(identical, sum(len(group) for group, _ in kept))


def deterministic_note(agreement: SampleAgreement, tau: float) -> str:
    """The sentence vat prints when `agreement.nearly_deterministic` (without a prefix)."""
    return (
        f"the posterior is nearly deterministic: {agreement.identical} of {agreement.total} "
        f"variational samples (tau {tau:g}) of the sentences it reconstructs decode to the "
        "input again; a model trained at a lower rate (model.loss.target_kl, nats per token) "
        "gives varied samples"
    )


def measure_agreement(
    generator, sentences: Sequence[str], num_samples: int = 4, tau: float = 1.0, seed: int = 0
) -> SampleAgreement:
    """`sample_agreement` of greedy decodings of posterior samples against the greedy
    mu-decoding, with a `vat.generate.VATGenerator`."""
    texts = list(sentences)
    samples = generator.sample(texts, num_samples, tau, seed=seed)
    return sample_agreement(samples, generator.reconstruct(texts), texts)

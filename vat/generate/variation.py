"""Do variational samples vary? Measured on outputs, over sentences whose mu-decoding is the
input (elsewhere identical samples mean collapse, the opposite case)."""

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
        return self.identical / self.total if self.total else 0.0

    @property
    def nearly_deterministic(self) -> bool:
        return self.total >= MIN_SAMPLES and self.fraction >= NEARLY_DETERMINISTIC


def sample_agreement(
    samples: Sequence[Sequence[str]], means: Sequence[str], inputs: Sequence[str]
) -> SampleAgreement:
    """How many `samples[i]` equal `means[i]`, over sentences whose `means[i]` is `inputs[i]`."""
    for name, other in (("means", means), ("inputs", inputs)):
        if len(other) != len(samples):
            raise OptionError(
                name, f"has {len(other)} texts for {len(samples)} sentences; give one each"
            )
    kept = [(g, m.strip()) for g, m, x in zip(samples, means, inputs) if m.strip() == x.strip()]
    identical = sum(s.strip() == m for group, m in kept for s in group)
    return SampleAgreement(identical, sum(len(group) for group, _ in kept))


def deterministic_note(agreement: SampleAgreement, tau: float) -> str:
    return (
        f"the posterior is nearly deterministic: {agreement.identical} of {agreement.total} "
        f"variational samples (tau {tau:g}) of the sentences it reconstructs decode to the "
        "input again; a model trained at a lower rate (model.loss.target_kl, nats per token) "
        "gives varied samples"
    )


def measure_agreement(
    generator, sentences: Sequence[str], num_samples: int = 4, tau: float = 1.0, seed: int = 0
) -> SampleAgreement:
    """`sample_agreement` of greedy decodings with a `vat.generate.VATGenerator`."""
    texts = list(sentences)
    samples = generator.sample(texts, num_samples, tau, seed=seed)
    return sample_agreement(samples, generator.reconstruct(texts), texts)

"""How `vat score` and `vat.load(...).score` score: the settings, checked when made. Apart
from vat.score.table so that `vat score --help` shows their defaults without importing torch."""

from __future__ import annotations

from dataclasses import dataclass

from vat.errors import OptionError, check_count, check_seed

DEFAULT_SAMPLES = 500  # K importance samples per sentence, as He et al. (2019) report


@dataclass(frozen=True)
class ScoreSettings:
    """How `score_table` scores (the Python names of `vat score`'s options)."""

    samples: int = DEFAULT_SAMPLES  # K importance samples (decoder passes) per sentence
    batch_size: int = 32  # sentences per encoder/decoder batch (length-sorted)
    diversity_samples: int = 5  # M samples per sentence (tau 1) for distinct-n, self-BLEU; 0 skips
    prior_samples: int = 100  # P samples from the prior (training lengths); 0 skips
    seed: int = 0  # seeds every draw: same inputs, settings and device give the same table
    progress: bool = False

    def __post_init__(self) -> None:
        check_count(self.samples, "samples")
        check_count(self.batch_size, "batch_size")
        for name in ("diversity_samples", "prior_samples"):
            value = check_count(getattr(self, name), name, minimum=0)
            if value == 1:
                raise OptionError(
                    name, "must be 0 (skip) or at least 2: self-BLEU compares samples"
                )
        if self.seed is None:
            raise OptionError("seed", "must be a whole number in [0, 2**63), got None")
        # torch's generators take seeds below 2**63: refused before the model is read
        check_seed(self.seed)

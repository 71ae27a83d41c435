"""How varied generated sentences are: distinct-n (Li et al. 2016) and self-BLEU (Zhu et al. 2018,
Texygen), over words as sacreBLEU's "13a" tokenizer splits them, as vat's reconstruction BLEU."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

# sacreBLEU's tokenizer_13a (mteval-v13a.pl), the regexes in its order. Written out because
# torchmetrics keeps its copy private (_SacreBLEUTokenizer); tests check the two agree.
_13A = (
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
)


def words(text: str) -> list[str]:
    """`text` split into words by sacreBLEU's 13a rules (case kept)."""
    text = text.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in text:
        for entity, char in (("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">")):
            text = text.replace(entity, char)
    text = f" {text} "
    for pattern, repl in _13A:
        text = pattern.sub(repl, text)
    return text.split()


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct n-grams over all n-grams of `texts` (Li et al. 2016); 0.0 when there is none."""
    grams = [g for t in texts for g in ngrams(words(t), n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def sentence_bleu(hypothesis: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """BLEU-4 (0-1) of one tokenized hypothesis against tokenized references as NLTK's
    `sentence_bleu` with `SmoothingFunction().method1` computes it (Texygen's self-BLEU): a zero
    n-gram count becomes 0.1, the brevity penalty uses the closest reference length."""
    if not hypothesis:
        return 0.0
    log_precision = 0.0
    for n in range(1, 5):
        counts = Counter(ngrams(hypothesis, n))
        most: Counter = Counter()
        for ref in references:
            for g, c in Counter(ngrams(ref, n)).items():
                most[g] = max(most[g], c)
        matched = sum(min(c, most[g]) for g, c in counts.items())
        if n == 1 and matched == 0:
            return 0.0  # NLTK: no unigram in common, no smoothing
        # NLTK's denominator is at least 1: a hypothesis shorter than n words scores 0.1 / 1
        log_precision += 0.25 * math.log((matched or 0.1) / max(1, sum(counts.values())))
    h = len(hypothesis)
    r = min((len(ref) for ref in references), key=lambda n: (abs(n - h), n), default=0)
    penalty = 1.0 if h > r else math.exp(1 - r / h)
    return penalty * math.exp(log_precision)


def self_bleu(texts: Sequence[str]) -> float:
    """Self-BLEU-4 (Zhu et al. 2018, Texygen), 0-100: the mean `sentence_bleu` of each text against
    all the others; 100 when every text is the same, lower is more varied."""
    if len(texts) < 2:
        raise ValueError(f"self-BLEU needs at least 2 texts, got {len(texts)}")
    toks = [words(t) for t in texts]
    scores = [sentence_bleu(h, toks[:i] + toks[i + 1 :]) for i, h in enumerate(toks)]
    return 100.0 * sum(scores) / len(scores)

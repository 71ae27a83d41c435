"""The SentEval-compatible evaluation harness behind `vat evaluate` (docs/evaluate.md)."""

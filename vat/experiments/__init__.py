"""Experiments built on vat: `vat sweep` trains one run per point of any train-config key
(`config`, `sweep`), measures each (`measure`) and charts the rate frontier (`frontier`)."""

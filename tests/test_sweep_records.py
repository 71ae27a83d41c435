"""A sweep's finished run is measured once: its record.json is read back on a rerun, and a
damaged one is one line that names the file and the way out."""

from __future__ import annotations

import pytest

from vat.errors import VatError
from vat.experiments.sweep import _load_json


@pytest.mark.parametrize(
    "text, why", [("[" * 100_000, "nested too deeply"), ("{not json", "Expecting property name")]
)
def test_a_damaged_record_is_one_line_naming_it(tmp_path, text, why):
    record = tmp_path / "record.json"
    record.write_text(text)
    with pytest.raises(VatError) as e:
        _load_json(record)
    message = str(e.value)
    assert message.startswith(f"{record} is not valid JSON (") and why in message
    assert message.endswith("delete it to redo that run's measurements") and "\n" not in message

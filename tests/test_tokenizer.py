import pytest

from vat.tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, VATTokenizer, make_batch


def test_special_ids_and_roundtrip(tiny_tokenizer, tmp_path):
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tiny_tokenizer.tokenizer.token_to_id(t) == i
    text = "The cat sat on the mat, naïvely — 42 times."
    assert tiny_tokenizer.decode(tiny_tokenizer.encode(text)) == text  # byte-level BPE is lossless
    path = tmp_path / "tok.json"
    tiny_tokenizer.save(path)
    again = VATTokenizer.from_file(path)
    assert again.encode(text) == tiny_tokenizer.encode(text)
    assert VATTokenizer.from_str(tiny_tokenizer.to_str()).to_str() == tiny_tokenizer.to_str()


def test_decode_stops_at_eos(tiny_tokenizer):
    ids = tiny_tokenizer.encode("The cat sat.")
    assert tiny_tokenizer.decode(ids + [EOS_ID] + tiny_tokenizer.encode(" junk")) == "The cat sat."


def test_bad_tokenizer_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        VATTokenizer.from_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    from vat.errors import VatError

    with pytest.raises(VatError, match="not a valid tokenizers JSON"):
        VATTokenizer.from_file(bad)
    # valid tokenizers JSON, but not vat's special-token layout
    from tokenizers import Tokenizer, models

    other = tmp_path / "other.json"
    Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")).save(str(other))
    with pytest.raises(VatError, match=f"tokenizer file {other}: tokenizer must map"):
        VATTokenizer.from_file(other)


def test_make_batch_layout():
    b = make_batch([[10, 11, 12], [13]], max_len=3)
    assert b["src"].tolist() == [[10, 11, EOS_ID], [13, EOS_ID, PAD_ID]]
    assert b["tgt_in"].tolist() == [[BOS_ID, 10, 11], [BOS_ID, 13, PAD_ID]]
    assert b["tgt_out"].tolist() == b["src"].tolist()

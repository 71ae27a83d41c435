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


def test_clip_bounds_the_characters_before_tokenising(tiny_tokenizer, tiny_sentences):
    """A sentence is cut to max_chars(k) = CLIP_MARGIN * k * chars_per_token characters before
    it is tokenised, which never changes the first k ids."""
    from vat.tokenizer import CLIP_MARGIN

    vocab = tiny_tokenizer.tokenizer.get_vocab()
    longest = max(len(t) for t in vocab)  # byte-level entries: one symbol per byte
    assert tiny_tokenizer.chars_per_token == longest
    assert tiny_tokenizer.max_chars(63) == CLIP_MARGIN * 63 * longest
    limit = tiny_tokenizer.max_chars(5)
    assert tiny_tokenizer.clip("x" * limit, 5) == "x" * limit  # at the bound: kept whole
    assert tiny_tokenizer.clip("x" * (limit + 1), 5) == "x" * limit
    # a text of at most k tokens has at most k * longest characters: never cut
    for s in tiny_sentences:
        ids = tiny_tokenizer.encode(s)
        assert len(s) <= len(ids) * longest
        assert tiny_tokenizer.encode(s, max_tokens=len(ids)) == ids
        assert tiny_tokenizer.encode_batch([s], max_tokens=len(ids)) == [ids]
    # a long text: the first k ids are those of the whole text
    text = " ".join(tiny_sentences * 20)
    whole = tiny_tokenizer.encode(text)
    for k in (1, 7, 63, 500):
        assert tiny_tokenizer.encode(text, max_tokens=k) == whole[:k]
        assert len(tiny_tokenizer.clip(text, k)) == min(len(text), tiny_tokenizer.max_chars(k))


def test_other_tokenizers_get_a_generous_bound():
    """A tokenizer that is not byte-level BPE (one <unk> can stand for a whole word) is cut
    only at OTHER_CHARS_PER_TOKEN characters per token."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from vat.tokenizer import CLIP_MARGIN, OTHER_CHARS_PER_TOKEN

    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS + ["a"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    other = VATTokenizer(tok)
    assert other.chars_per_token == OTHER_CHARS_PER_TOKEN
    assert other.max_chars(2) == CLIP_MARGIN * 2 * OTHER_CHARS_PER_TOKEN
    word = "b" * 1500  # one <unk> token of 1,500 characters: kept whole
    assert other.encode(f"a {word}", max_tokens=2) == other.encode(f"a {word}") == [4, 3]

"""Normalisation and attribute extraction on real PriceRunner / Abt-Buy titles."""

from __future__ import annotations

import polars as pl
import pytest

from pairsieve.text import attributes as text
from pairsieve.text import match


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("Apple iPhone 8 Plus 64 GB Spacegrau", "apple iphone 8 plus 64gb spacegrau"),
        ("Samsung  Galaxy S9\u00a0128-gb", "samsung galaxy s9 128gb"),
        ("Bosch WAW325H0GB 9 kg 1600 RPM", "bosch waw325h0gb 9kg 1600rpm"),
        ("Ｓｏｎｙ KD-49XF8096", "sony kd-49xf8096"),
        # Altosight: French byte units, and speeds in bytes a second
        (
            "Carte SD Lexar SDHC 16 Go premium 300x 45 Mo/s",
            "carte sd lexar sdhc 16gb premium 300x 45mbs",
        ),
        ("SanDisk Extreme 32GB (bis zu 90MB/Sek.)", "sandisk extreme 32gb (bis zu 90mbs)"),
        # Walmart-Amazon: "to" between connectors is English, not terabytes
        ("Sabrent USB 2.0 to DB25F Parallel Cable", "sabrent usb 2.0 to db25f parallel cable"),
        # Alaska: a megapixel figure whose decimal point became a space
        ("Canon EOS 70D 20 2 MP Digital Camera", "canon eos 70d 20.2mp digital camera"),
        ("nikon d700 12 1mp slr | ebay", "nikon d700 12.1mp slr | ebay"),
        # ... but not other units: "2 4gb" may be two 4 GB sticks
        ("Corsair kit 2 4GB DDR3", "corsair kit 2 4gb ddr3"),
        ("canon eos 7d 18 0 Megapixel camera", "canon eos 7d 18.0mp camera"),
        # Alaska: a price tells offers apart, not products
        (
            "canon eos 5d mark iii 22.3mp on sale for $3509.95",
            "canon eos 5d mark iii 22.3mp on sale for",
        ),
        ("nikon d50 6.1mp body used $1 | ebay", "nikon d50 6.1mp body used | ebay"),
        ("Karte 16 GB 39,90 €", "karte 16gb"),
    ],
)
def test_normalize_glues_units_and_keeps_digits(raw: str, want: str) -> None:
    assert text.normalize(raw) == want
    assert pl.select(text.normalize_expr(pl.lit(raw))).item() == want


def attrs(title: str) -> text.Attributes:
    return text.extract_attributes(text.normalize(title))


def test_attributes_of_a_phone_title() -> None:
    a = attrs("apple mq8n2b/a iphone 8 plus 64gb 5.5 12mp sim free smartphone in gold")
    assert "mq8n2b" in a.codes  # region suffix "/a" dropped
    assert ("bytes", 64.0) in a.quantities and ("pixels", 12.0) in a.quantities
    assert a.variants == {"plus"}
    assert "8" in a.numbers
    assert "gold" not in a.words  # colour words do not count towards Jaccard


def test_plus_sign_and_generations() -> None:
    assert attrs("samsung galaxy s8+ 64gb").variants == {"plus"}
    assert attrs("canon eos 6d mark ii").generations == {"ii"}
    assert attrs("canon eos 6d mk 2 dslr camera body").generations == {"ii"}
    assert attrs("sony cyber shot rx100 mk4").generations == {"iv"}


def test_codes_split_hyphenated_and_spaced() -> None:
    assert "i78700k" in attrs("intel core i7-8700k 3.7ghz").codes
    assert "gnp2713" in attrs("liebherr gnp 2713 freestanding freezer").joined
    assert "55uk6500" in attrs("lg 55 uk6500 4k ultra hd").joined
    assert "rsaav22p1" in attrs("hotpoint rsaav22p.1 fridge white").codes


def test_hyphenated_code_groups_match_their_glued_spelling() -> None:
    # Abt-Buy: one seller writes "DAV-HDX279WC", "CLI-8Y", the other "DAVHDX279WC", "CLI8Y"
    assert attrs("sony dav-hdx279wc home theater").codes == attrs("sony davhdx279wc").codes
    assert attrs("canon cli-8y ink").models == attrs("canon yellow ink - cli8y").models == {"cli8y"}
    assert "mb15bluseev2" in attrs("speck case mb15-blu-see-v2").codes
    # a group without a part mixing letters and digits is left alone
    assert text.tokens("sony 5-disc wi-fi changer") == ["sony", "5", "disc", "wi", "fi", "changer"]


def test_tb_and_gb_compare_as_one_unit() -> None:
    assert attrs("seagate 1tb drive").quantities == attrs("seagate 1000 gb drive").quantities


def test_low_information_titles() -> None:
    assert not attrs("washing machine").informative
    assert not attrs("1400rpm washing machine 9kg load class a white").informative
    assert not attrs("hotpoint free standing washing machine in white").informative
    assert attrs("smeg st523 dishwasher").informative
    assert attrs("apple iphone xs 256gb silver").informative


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("ue55nu8000", "ue55nu8000txxu"),
        ("55nu8000", "ue55nu8000t"),
        ("55pus6503", "55pus6503"),
    ],
)
def test_code_suffixes_are_compatible(a: str, b: str) -> None:
    assert match.codes_compatible(a, b)
    assert match.code_keys(a) & match.code_keys(b)


@pytest.mark.parametrize(
    ("left", "right", "reason"),
    [
        ("apple iphone 8 64gb silver", "apple iphone 8 256gb silver", "bytes_conflict"),
        ("apple iphone 8 64gb silver", "apple iphone 8 plus 64gb silver", "variant_conflict"),
        ("sony rx100 iv", "sony rx100 vi", "generation_conflict"),
        ("panasonic lx100", "panasonic lx100 mark ii", "generation_conflict"),
        ("samsung ue55nu8000", "samsung ue65nu8000", "model_code_conflict"),
        ("samsung galaxy s8 64gb", "samsung galaxy s9 64gb", "model_token_conflict"),
        ("apple iphone 7 32gb", "apple iphone 8 32gb", "number_conflict"),
    ],
)
def test_conflicts_name_their_reason(left: str, right: str, reason: str) -> None:
    assert match.conflict(attrs(left), attrs(right)) == reason


def test_a_shared_speed_does_not_hide_a_capacity_conflict() -> None:
    """Abt-Buy: the same card line in two sizes, at one speed. Read as a size, "20 mb" would be
    a size both titles share."""
    two = attrs("Panasonic 2GB SD Card ProHiSpd 20 MB/sec - RP-SDV02GU1A")
    four = attrs("Panasonic 4GB SDHC Card Class 6 20 MB/sec - RP-SDV04GU1K")
    assert ("rate", 160.0) in two.quantities
    assert match.quantity_conflict(two, four) == "bytes_conflict"
    assert match.quantity_conflict(attrs("ssd 520 MB/s"), attrs("ssd 4160 Mbps")) is None


def test_a_lost_decimal_point_does_not_split_a_camera() -> None:
    """Alaska: one eBay seller writes 20.2 MP as "20 2 mp"; another camera's 24.2 still clashes."""
    ebay = attrs("brand new canon eos 70d 20 2 mp digital camera body only camera bag bundle")
    shop = attrs("canon eos 70d 20.2 mp digital slr camera kit - walmart.com")
    assert match.quantity_conflict(ebay, shop) is None
    other = attrs("nikon d3200 24 2 mp digital slr camera red | ebay")
    assert match.quantity_conflict(ebay, other) == "pixels_conflict"


def test_megapixels_compare_in_whole_units() -> None:
    """Sellers round pixel counts: 16.1 MP is sold as 16 MP. Whole megapixels still clash."""
    assert match.quantity_conflict(attrs("nikon d7000 16mp body"), attrs("d7000 16.2mp")) is None
    assert (
        match.quantity_conflict(attrs("d7000 16.2mp"), attrs("d7100 24.1mp")) == "pixels_conflict"
    )
    assert match.quantity_conflict(attrs("1tb drive"), attrs("1.5tb drive")) == "bytes_conflict"


def test_code_conflicts_need_an_unmatched_code_on_both_sides() -> None:
    a = attrs("liebherr gp 1486 freistehend senkrecht 104l")
    assert match.compare_codes(a, attrs("liebherr gp1486 under counter freezer")) == (True, False)
    tv = attrs("lg oled55b7v 55in oled 4k tv wc01")
    other = attrs("samsung 55 mu6120 tv ue55mu6120kxxu wc01")  # shares only a seller code
    assert match.compare_codes(tv, other) == (False, True)
    small = attrs("lg 32lv541h 81.3cm 32 hd led tv")
    large = attrs("lg 49lv541h lv541h series 49 led tv")  # "lv541h" matches both, sizes differ
    assert match.compare_codes(small, large) == (False, True)


def test_shared_code_overrides_marketing_words_not_quantities() -> None:
    a = attrs("hotpoint nm10944ww ultra efficient 9kg washing machine")
    b = attrs("hotpoint nm10944wwuk 9kg 1400 spin washing machine")
    assert match.conflict(a, b) is None
    c = attrs("hotpoint nm10944ww 8kg washing machine")
    assert match.conflict(a, c) == "mass_conflict"


def _reference_attributes(title_norm: str) -> text.Attributes:
    """`extract_attributes` without its per-token memo: the plain per-title loop."""
    toks = text._split_glued(text.tokens(title_norm))
    codes, models, numbers, quantities, variants, generations = (set() for _ in range(6))
    for i, tok in enumerate(toks):
        quantity = text._QUANTITY.match(tok)
        generation = text._generation(tok, toks[i + 1] if i + 1 < len(toks) else "")
        if tok in text._NETWORK:
            continue
        if generation:
            generations.add(generation)
        elif quantity:
            quantities.add(text.quantity_of(quantity))
        elif text._is_code(tok):
            codes.add(tok)
        elif text._NUMBER.match(tok):
            numbers.add(tok)
        elif text._ALNUM.match(tok):
            models.add(tok)
        elif tok in text.VARIANT_WORDS:
            variants.add(tok)
    return text.Attributes(
        codes=frozenset(codes),
        joined=frozenset(text._joined_codes(toks) - codes),
        models=frozenset(models),
        numbers=frozenset(numbers),
        quantities=frozenset(quantities),
        variants=frozenset(variants),
        generations=frozenset(generations),
        words=frozenset(t for t in toks if t not in text.COLOUR_WORDS),
    )


TRICKY = [
    "sony rx100 mark ii",
    "sony rx100 mk 4 mark",
    "canon eos 5d mk4 body",
    "samsung galaxy s8+ 64gb",
    "samsung galaxy note8 note 8 4g lte",
    "intel core i7-8700k 3.7ghz lga1151 i7-8700k",
    "apple mq8n2b/a 55pus6503/12 x-1/ab",
    "gnp 2713 55 uk6500 abc 1234 mark",
    "p.1 2.5l 1.5tb 0.5 ... mark",
    "iphone xs max 256gb 5g 4g lte",
    "",
    "mark",
]


def test_memoised_extraction_equals_the_plain_loop() -> None:
    for title in TRICKY + [text.normalize(t) for t in TRICKY]:
        assert text.extract_attributes(title) == _reference_attributes(title), title
        assert text.extract_attributes(title) == _reference_attributes(title), title  # memo warm


def test_memoised_extraction_on_real_titles(shared_data) -> None:
    from pairsieve.datasets import pricerunner

    titles = pricerunner.load_catalog(shared_data)
    norm = titles.select(text.normalize_expr(pl.col("title")).unique().sort())["title"].to_list()
    for title in norm[::3]:
        assert text.extract_attributes(title) == _reference_attributes(title), title


def test_code_keys_equal_the_plain_definition() -> None:
    """`code_keys` (digit positions) equals its definition: the code, every 6-char stretch
    holding a digit, and the digit core when >= 4 chars; on random letter/digit strings."""
    import random

    def plain(code: str) -> set[str]:
        keys = {code}
        keys.update(
            code[i : i + 6] for i in range(len(code) - 5) if any(map(str.isdigit, code[i : i + 6]))
        )
        if any(map(str.isdigit, code)):
            core = match.code_core(code)
            if len(core) >= 4:
                keys.add(core)
        return keys

    rng = random.Random(0)
    codes = ["", "a", "abcdefghij", "ue55nu8000txxu", "1abcdefgh2", "ab\u00b2cdefghi1"]
    codes += [
        "".join(rng.choice("ab1\u00b2x") for _ in range(rng.randint(0, 16))) for _ in range(3000)
    ]
    for code in codes:
        assert match.code_keys(code) == plain(code), code


def test_attributes_pickle_round_trip() -> None:
    """`Attributes` pickle as their field values (sent back by `cluster`'s forked worker)."""
    import pickle

    for title in ("samsung ue55nu8000 55 8 series", "apple iphone 8 plus 64gb", "washing machine"):
        attrs = text.extract_attributes(title)
        back = pickle.loads(pickle.dumps(attrs, protocol=pickle.HIGHEST_PROTOCOL))
        assert back == attrs
        assert back.informative == attrs.informative

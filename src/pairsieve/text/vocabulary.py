"""The general product vocabulary that attribute extraction reads: words that name a variant,
a generation or a colour. General words only, not tuned to one data set."""

from __future__ import annotations

# Variant words name a different product without any digit ("plus", "xs", "max").
VARIANT_WORDS = frozenset(
    ("plus pro max mini lite ultra xs xr xl se neo edge note prime air duo go").split()
)
# Generation markers ("mark ii", roman numerals) separate products even under one model code
# ("rx100 iv" vs "rx100 vi", "lx100" vs "lx100 mark ii").
GENERATION_WORDS = frozenset(("mark mk ii iii iv vi vii viii ix xi xii").split())
# Colour words (and common German/French spellings) are variants of one product in some
# categories and separate SKUs in others, so they neither veto nor count towards Jaccard.
COLOUR_WORDS = frozenset(
    (
        "black white silver grey gray gold rose red blue green pink purple yellow orange brown "
        "bronze graphite midnight space titanium champagne cream beige inox stainless steel "
        "chrome schwarz weiss weiß silber grau spacegrau blau rot noir blanc argent gris or "
        "rosegold jet matte glossy anthracite aluminium"
    ).split()
)

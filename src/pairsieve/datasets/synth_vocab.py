"""Vocabulary of the synthetic marketplace: categories, product lines, variants, seller wording.

Data only; `pairsieve.datasets.synth` turns it into listings. Brands and line names are real so
that titles tokenise and embed like real ones; generations beyond the real ones are fictional.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Category:
    """One product category. ``lines`` are (brand, model pattern with {g} = generation, first
    generation, part-number prefix); variants are ``tiers`` x ``sizes``."""

    label: str
    lines: tuple[tuple[str, str, int, str], ...]
    tiers: tuple[str, ...]
    sizes: tuple[int, ...]
    unit: str
    n_colours: int
    words: tuple[str, ...]
    price: float
    glue_tier: bool = False


CATEGORIES = (
    Category(
        "Mobile Phones",
        (
            ("Apple", "iPhone {g}", 8, "MQ"),
            ("Samsung", "Galaxy S{g}", 8, "SM-G9"),
            ("Samsung", "Galaxy A{g}", 10, "SM-A"),
            ("Google", "Pixel {g}", 3, "GA0"),
            ("Xiaomi", "Redmi Note {g}", 7, "M19"),
            ("Motorola", "Moto G{g}", 6, "XT19"),
            ("OnePlus", "Nord N{g}0", 1, "CPH2"),
        ),
        ("", "Plus", "Pro", "Pro Max", "Ultra", "Lite"),
        (64, 128, 256, 512),
        "GB",
        10,
        ("Smartphone", "Dual SIM", "5G", "Unlocked", "SIM-free", "Handy", "4G LTE", "NEW"),
        420.0,
    ),
    Category(
        "Tablets",
        (
            ("Apple", "iPad Air {g}", 3, "MY"),
            ("Samsung", "Galaxy Tab S{g}", 5, "SM-T8"),
            ("Lenovo", "Tab P1{g}", 1, "ZA7"),
            ("Microsoft", "Surface Pro {g}", 6, "QE"),
        ),
        ("Wi-Fi", "Cellular", "LTE"),
        (32, 64, 128, 256),
        "GB",
        5,
        ("Tablet", "NEW", "Retina", "Multi-Touch", "Tablet-PC"),
        380.0,
    ),
    Category(
        "TVs",
        (
            ("Samsung", "Crystal UHD AU{g}100", 7, "UE"),
            ("LG", "OLED C{g}", 1, "OLED"),
            ("Sony", "Bravia X{g}0J", 8, "KD-"),
            ("Philips", "Ambilight PUS{g}506", 7, "PUS"),
            ("TCL", "QLED C{g}35", 6, "C"),
        ),
        ("",),
        (43, 50, 55, 65, 75),
        "inch",
        2,
        ("4K UHD", "Smart TV", "HDR", "LED TV", "Fernseher", "Television"),
        650.0,
    ),
    Category(
        "Laptops",
        (
            ("Lenovo", "ThinkPad E1{g}", 4, "20T"),
            ("HP", "ProBook 4{g}0", 4, "6F"),
            ("Asus", "ZenBook UX{g}25", 3, "UX"),
            ("Acer", "Swift SF{g}14", 3, "NX"),
        ),
        ("i3", "i5", "i7"),
        (128, 256, 512),
        "GB",
        3,
        ("Notebook", "Laptop", "Windows 11", "Full HD", "SSD"),
        780.0,
    ),
    Category(
        "Headphones",
        (
            ("Sony", "WH-1000XM{g}", 2, "WH1000XM"),
            ("Bose", "QuietComfort {g}5", 1, "QC"),
            ("JBL", "Tune {g}00", 5, "JBLT"),
            ("Sennheiser", "Momentum {g}", 2, "M3"),
        ),
        ("", "Pro", "Max", "Wireless"),
        (),
        "",
        5,
        ("Bluetooth", "Noise Cancelling", "Over-Ear", "Kopfhörer", "Headset"),
        210.0,
    ),
    Category(
        "Washing Machines",
        (
            ("Bosch", "Serie {g} WAU28", 4, "WAU"),
            ("Samsung", "WW{g}0T", 7, "WW"),
            ("Miele", "WCA{g}20", 0, "WCA"),
            ("AEG", "L{g}FEE", 6, "L"),
        ),
        ("", "Steam", "AutoDose"),
        (7, 8, 9, 10),
        "kg",
        2,
        ("Waschmaschine", "Washing Machine", "Front Loader", "Energy Class A"),
        540.0,
    ),
    Category(
        "CPUs",
        (
            ("Intel", "Core i5-{g}400", 10, "BX8070"),
            ("Intel", "Core i7-{g}700", 10, "BX8071"),
            ("AMD", "Ryzen 5 {g}600", 3, "100-1"),
            ("AMD", "Ryzen 7 {g}700", 3, "100-2"),
        ),
        ("", "K", "F", "KF", "X"),
        (),
        "",
        0,
        ("Processor", "Boxed", "Tray", "CPU", "Desktop Processor"),
        260.0,
        glue_tier=True,
    ),
)
# How sellers write one size: four house styles per unit ({c} = the size in centimetres).
SIZE_FORMS = {
    "GB": ("{v}GB", "{v} GB", "{v}gb", "{v} Go"),
    "inch": ('{v}"', "{v} inch", "{v} Zoll", "{c} cm"),
    "kg": ("{v}kg", "{v} kg", "{v} Kg", "{v}KG"),
}
REGIONS = ("B/A", "ZD/A", "LL/A", "/DS", "EU", "XEU", "UK", "DE")

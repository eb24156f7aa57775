"""`pairsieve eval`: pairsieve's clustering and the baselines scored against a truth column."""

from __future__ import annotations


def test_eval_command_scores_cross_shop_pairs(tmp_path, session_cache_dir) -> None:
    import json

    import polars as pl
    from typer.testing import CliRunner

    from pairsieve.cli import app

    titles = [
        ("a1", "apple iphone 8 64gb silver", "P1", "shop-a"),
        ("b1", "Apple iPhone 8 64 GB - Silver", "P1", "shop-b"),
        ("a2", "samsung ue55nu8000 55 8 series flat led tv", "P2", "shop-a"),
        ("b2", "samsung ue55nu8000txxu 55 inch 4k hdr smart tv", "P2", "shop-b"),
        ("a3", "sony wh-1000xm3 wireless headphones black", "P3", "shop-a"),
    ]
    catalog = tmp_path / "catalog.parquet"
    pl.DataFrame(
        {
            "listing_id": [t[0] for t in titles],
            "title": [t[1] for t in titles],
            "truth": [t[2] for t in titles],
            "shop": [t[3] for t in titles],
        }
    ).write_parquet(catalog)
    base = ["eval", "--catalog", str(catalog), "--truth-column", "truth"]
    base += ["--set", f'cache_dir="{session_cache_dir}"']
    result = CliRunner().invoke(app, [*base, "--source-column", "shop"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout[result.stdout.index("{") :])["pairsieve"]
    assert scores["true_pairs"] == 2  # a1-b1 and a2-b2, both across the shops
    missing = CliRunner().invoke(app, [*base, "--source-column", "seller"])
    assert (
        missing.exit_code == 2
        and "seller" in missing.output
        and "--source-column" in missing.output
    )

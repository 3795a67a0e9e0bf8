"""The demo's code path end to end, on a tiny model instead of the embedded default."""

from __future__ import annotations

from privft.cli import main


def test_demo_compares_undefended_and_soft_on_one_split(tiny_model, tokenizer, tmp_path, capsys):
    tiny_model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    main(["demo", "--model", str(tmp_path / "base"), "--members", "24", "--non-members", "24", "--epochs", "2",
          "--out", str(tmp_path / "demo")])
    printed = capsys.readouterr().out
    assert "AUC undefended" in printed and "AUC SOFT (paper rule)" in printed
    assert "24 members vs 24 non-members" in printed and "canary exposure" in printed
    for run in ("undefended", "soft"):
        assert (tmp_path / "demo" / run / "report.json").exists()
        assert (tmp_path / "demo" / run / "model" / "README.md").exists()
    assert (tmp_path / "demo" / "comparison.md").read_text().startswith("## privft demo")

"""Comparisons of variants over seeds (``compare``), their summary tables (``summary``) and
figures (``plots``, which take plain data)."""

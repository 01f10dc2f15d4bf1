"""fedray beside the authors' own code (docs/authors.md): ``compare.py`` and one adapter a paper."""

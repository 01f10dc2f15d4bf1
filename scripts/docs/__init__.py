"""The generator of the pages drawn from recorded runs, and the quick-start's record."""

"""The reproductions of the papers' tables and figures (docs/reproductions.md): one script a
paper's experiment, its page writer, and the claims tested on their recorded runs."""

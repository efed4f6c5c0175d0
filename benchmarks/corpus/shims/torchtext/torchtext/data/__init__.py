"""``torchtext.data``: only `utils` is provided."""

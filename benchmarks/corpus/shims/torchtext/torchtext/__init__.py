"""Our own small stand-in for the parts of `torchtext` (no longer released for current torch)
that corpus programs import: `data.utils.get_tokenizer`, `vocab.build_vocab_from_iterator`
and the `datasets.Multi30k` translation pairs, synthetic and learnable (see
`datasets.multi30k`). Nothing is downloaded."""

__version__ = "0.18.0"

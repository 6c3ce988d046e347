"""Networks and conversions: the digit CNNs and ViTs (:mod:`.architectures`, :mod:`.vit_heads`), the pure-torch
BERT (:mod:`.text`), the B-cos LM conversion (:mod:`.bcos_text`) and ALOE's alignment (:mod:`.aloe`)."""

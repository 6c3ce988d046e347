"""The data the zoo trains on and the suites evaluate: MNIST digits (:mod:`.mnist`), the offline text sets
(:mod:`.text`, files in ``files/``) and Hugging Face data sets (:mod:`.hf`)."""

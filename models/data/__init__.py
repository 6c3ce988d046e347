"""The data the zoo trains on and the suites evaluate: MNIST digits (:mod:`.mnist`) and animal silhouettes
(:mod:`.animal_mnist`), by name in :mod:`.splits`, the offline text sets (:mod:`.text`, files in ``files/``) and
Hugging Face data sets (:mod:`.hf`); the evaluation data sets the suites name, each registered beside its loader, in
:mod:`.datasets`."""

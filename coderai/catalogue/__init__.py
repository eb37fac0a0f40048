"""The model catalogue and its tooling: the entries of models.json (`entries.py`), a model
file's format read from the file (`file_format.py`), the options an entry may give
(`model_options.py`), its own chat template (`templatefile.py`), its facts as /v1/models
tells them (`model_facts.py`), the memory it takes loaded (`model_memory.py` over
`gguf_header.py`, read from the files by `entry_estimate.py`), the models other tools keep
(`model_scan.py`), and the model a fresh install serves (`defaults.py`).

The front and the engines both use it, so it imports neither side; this file imports
nothing, so an engine that reads a format pays for no pydantic model."""

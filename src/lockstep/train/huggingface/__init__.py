"""Hugging Face integrations (``ray.train.huggingface``): see :mod:`.transformers`."""

__all__: list[str] = []

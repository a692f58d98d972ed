"""Callbacks for training frameworks: ``analyzer.integrations.lightning`` (Lightning) and
``analyzer.integrations.hf`` (Hugging Face ``transformers.Trainer``). Each is an optional extra:
``pip install 'gpuanalyze[lightning]'`` / ``'gpuanalyze[hf]'``."""

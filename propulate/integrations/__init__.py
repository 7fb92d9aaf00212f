"""Trainers inside a worker: PyTorch Lightning and Hugging Face, driven as generator loss functions.

Nothing here is imported by ``import propulate``; each module imports its trainer library when it is imported
and raises an ``ImportError`` naming the extra to install without it:

- :mod:`propulate.integrations.lightning` (``pip install "propulate[lightning]"``);
- :mod:`propulate.integrations.hf_trainer` (``pip install "propulate[transformers]"``);
- :mod:`propulate.integrations.bridge`, what both share: the trainer runs in a helper thread and hands each
  evaluation of the model to the loss function in the main thread.
"""

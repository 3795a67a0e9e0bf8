"""privft: training-time privacy for Hugging Face fine-tuning, with a membership-inference audit."""

__version__ = "0.1.0"

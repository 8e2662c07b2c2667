"""Hooks: a torchx connection -> the TorchX Runner, tracker connections -> tracker stores."""

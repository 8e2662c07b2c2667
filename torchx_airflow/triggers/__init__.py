"""Triggers: wait on TorchX apps in the triggerer, every wait on one scheduler sharing one poller."""

"""Sensors: wait on a TorchX app another task launched (``torchx.TorchXAppSensor``)."""

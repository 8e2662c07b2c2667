"""TaskFlow decorators of the TorchX provider: ``@task.torchx``."""

"""Extra links of TorchX tasks: the app's scheduler UI and its tracker run."""

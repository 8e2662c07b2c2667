"""Operators that dry-run and run TorchX apps (``torchx.TorchXOperator``, ``dryrun.TorchXDryRunOperator``)."""

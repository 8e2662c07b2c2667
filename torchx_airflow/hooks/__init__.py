"""Hooks: a torchx connection -> the TorchX Runner, tracker connections -> tracker stores."""

#: ``TorchXHook.default_conn_name``, here so that operators and sensors name it in their signatures
#: without importing the hook (and the connection settings and scheduler layer it brings) at DAG parse.
TORCHX_DEFAULT_CONN_ID = "torchx_default"
